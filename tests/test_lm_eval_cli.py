"""lm-eval's own command line with the package's tasks (--include_path) and the `darts` model (issue 17).

No data file needed, the module's correction applied, and the same numbers as `evaluate.evaluate_model` on the
corrected model."""

import json
import os
import subprocess
import sys
from pathlib import Path
import pytest
import torch
from darts_nb.core import darts_home
from darts_nb.evaluate import tasks_dir, evaluate_model, EvalSettings
from darts_nb.surgery import PositionSurgery, save_surgery, attach_surgery, load_surgery
from darts_nb.zoo import load_model

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 5


@pytest.fixture(scope='module')
def expert():
    p = darts_home() / 'zoo-ci' / 'math'
    assert (p / 'model.safetensors').exists(), f'the ci zoo is built by `make zoo-ci` ({p})'
    return p


def lm_eval(tmp: Path, *args, module='lm_eval') -> dict:
    "Run an lm-eval command line in a fresh process; its results and samples."
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, 'HF_HUB_OFFLINE': '1', 'HF_DATASETS_OFFLINE': '1', 'TOKENIZERS_PARALLELISM': 'false'}
    cmd = [
        sys.executable,
        '-m',
        module,
        'run',
        *args,
        '--tasks',
        'darts_math',
        '--limit',
        str(LIMIT),
        '--device',
        'cpu',
        '--batch_size',
        '4',
        '--output_path',
        str(tmp),
        '--log_samples',
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
    assert r.returncode == 0, r.stderr[-3000:]
    assert 'fatal: not a git repository' not in r.stderr or module == 'lm_eval'
    res = json.loads(next(tmp.rglob('results_*.json')).read_text())
    samples = [json.loads(line) for line in next(tmp.rglob('samples_darts_math_*.jsonl')).read_text().splitlines()]
    return dict(em=res['results']['darts_math']['exact_match,none'], answers=[s['filtered_resps'] for s in samples])


def module_dir(tmp: Path, zero: bool) -> Path:
    m = PositionSurgery(64, 4, 512)
    if not zero:
        torch.manual_seed(0)
        with torch.no_grad():
            m.b.normal_(0, 2.0)
            m.up.weight.normal_(0, 0.5)
    return save_surgery(m, tmp / ('zero' if zero else 'random'), domain='math')


@pytest.fixture(scope='module')
def runs(tmp_path_factory, expert):
    "The lm-eval runs the tests compare, each made once: the hf model, the darts model with a zero and a random module."
    tmp = tmp_path_factory.mktemp('lm_eval')
    mod = module_dir(tmp, False)
    return dict(
        tmp=tmp,
        module=mod,
        plain=lm_eval(
            tmp / 'plain', '--model', 'hf', '--model_args', f'pretrained={expert}', '--include_path', str(tasks_dir())
        ),
        zero=lm_eval(
            tmp / 'zero',
            '--model',
            'darts',
            '--model_args',
            f'pretrained={expert},surgery={module_dir(tmp, True)}',
            module='darts_nb.lm_eval',
        ),
        fixed=lm_eval(
            tmp / 'fixed',
            '--model',
            'darts',
            '--model_args',
            f'pretrained={expert},surgery={mod}',
            module='darts_nb.lm_eval',
        ),
    )


def test_the_tasks_run_under_lm_evals_own_command_line(runs):
    "The shipped YAMLs need no data file beside them (custom_dataset builds the split)."
    out = runs['plain']
    assert 0 <= out['em'] <= 1
    assert len(out['answers']) == LIMIT


def test_darts_model_with_a_zero_module_is_the_plain_model_and_a_module_is_applied(runs, expert):
    assert runs['zero'] == runs['plain']  # the darts model with a zero module: lm-eval's own hf model's answers
    fixed, plain = runs['fixed'], runs['plain']
    assert fixed['answers'] != plain['answers'], (
        fixed['em'],
        plain['em'],
    )
    assert fixed['em'] != plain['em'], (
        fixed['em'],
        plain['em'],
    )  # the correction reached the score
    model, tok = load_model(str(expert), 'cpu')
    attach_surgery(model, load_surgery(runs['module']))
    df = evaluate_model(model, tok, ['math'], settings=EvalSettings(eval_limit=LIMIT))
    assert df.set_index('metric').at['exact_match', 'value'] == pytest.approx(100 * fixed['em'])


def test_an_exported_checkpoint_is_the_corrected_model_for_lm_evals_hf_model(runs, expert, monkeypatch):
    "export_corrected's one folder, given to lm-eval's `hf` model with trust_remote_code: the darts model's answers."
    from darts_nb.deploy import export_corrected

    tmp = runs['tmp']
    monkeypatch.setenv('HF_MODULES_CACHE', str(tmp / 'hf_modules'))
    model, tok = load_model(str(expert), 'cpu')
    out = export_corrected(model, load_surgery(runs['module']), tmp / 'corrected', tokenizer=tok)
    hf = lm_eval(
        tmp / 'hf',
        '--model',
        'hf',
        '--model_args',
        f'pretrained={out},trust_remote_code=True',
        '--include_path',
        str(tasks_dir()),
    )
    assert hf == runs['fixed']


def test_a_missing_checkpoint_is_one_line_through_both_entry_points(capsys):
    "Issue 29: pretrained=/nonexistent is refused by name with exit status 2, not a traceback of transformers'."
    from darts_nb.cli import main as darts_main
    from darts_nb.lm_eval import main

    argv = ['run', '--model', 'darts', '--model_args', 'pretrained=/nonexistent', '--tasks', 'darts_math']
    says = "error: pretrained: expected a checkpoint folder or a hub id, got '/nonexistent' (no such folder)"
    for prog, call in (
        ('python -m darts_nb.lm_eval', lambda: main(argv)),
        ('darts lm-eval', lambda: darts_main(['lm-eval', *argv])),
    ):
        code = call()
        err = capsys.readouterr().err
        assert code == 2, err[-1000:]
        assert err.strip() == f'{prog}: {says}', err[-1000:]


def bad_modules(tmp: Path) -> dict:
    "Surgery folders that hold no usable module for the ci zoo's checkpoints -> what the refusal says."
    empty = tmp / 'empty'
    empty.mkdir()
    corrupt = save_surgery(PositionSurgery(64, 4, 512), tmp / 'corrupt', domain='math')
    (corrupt / 'surgery_config.json').write_text('{"kind": "position", ')
    wide = save_surgery(PositionSurgery(32, 4, 512), tmp / 'wide', domain='math')
    return {
        tmp / 'none': 'no such folder',
        empty: 'no saved surgery module here',
        corrupt: 'corrupt JSON',
        wide: 'hidden_size=32 but the model',
    }


def test_a_bad_module_folder_is_refused_before_the_checkpoint_loads(expert, tmp_path, monkeypatch, capsys):
    "Issue 29: surgery= is checked first: the checkpoint loader would fail the test if it were called."
    from lm_eval.models.huggingface import HFLM
    from darts_nb.lm_eval import darts_model_class, main

    def loads(*a, **k):
        raise AssertionError('the checkpoint was loaded before the module was checked')

    monkeypatch.setattr(HFLM, '__init__', loads)
    DartsLM = darts_model_class()
    for folder, says in bad_modules(tmp_path).items():
        args = f'pretrained={expert},surgery={folder}'
        code = main(['run', '--model', 'darts', '--model_args', args, '--tasks', 'darts_math', '--limit', '1'])
        err = capsys.readouterr().err
        assert code == 2, err[-1000:]
        assert str(folder) in err, err[-1000:]
        assert says in err, err[-1000:]
        assert 'Traceback' not in err, err[-1000:]
        assert err.count('\n') == 1, err
        with pytest.raises((ValueError, FileNotFoundError), match=says):
            DartsLM(pretrained=str(expert), surgery=str(folder))  # from Python (or an lm-eval config file) too
