"""`darts correct` / `correct.correct_merge` on the ci zoo (issue 28).

Bad input is a clear error before any model loads, in the library and at the command line (one line, exit 2); the
command runs end to end from a JSONL file and from local dataset folders, the diagnosis included, and writes module
folders that `SurgeryModule.from_pretrained` loads."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
import pytest
import transformers
from darts_nb.core import tiny_llama
from darts_nb.correct import correct_merge, read_prompts
from darts_nb.merge import run_merges, ta_config
from darts_nb.surgery import SurgeryModule
from test_bad_inputs_cli import run_main


@pytest.fixture(scope='module')
def merged(zoo, tmp_path_factory):
    "A task-arithmetic merge of the ci zoo's maths and code experts, made with mergekit."
    out = tmp_path_factory.mktemp('merges')
    res = run_merges(
        {'ta-0.5': ta_config(zoo / 'base', {d: zoo / d for d in ('math', 'code')}, 0.5)}, out, progress=False
    )
    assert list(res.status) == ['done'], res
    return out / 'ta-0.5'


@pytest.fixture(scope='module')
def texts():
    "Twelve prompts of the built-in maths domain (the user's own prompts would do as well)."
    return read_prompts('math', n=12)[0]


@pytest.fixture(scope='module')
def bad(zoo, texts, tmp_path_factory):
    "The inputs the table below refuses: checkpoints that do not fit, prompt files that are wrong."
    tmp = tmp_path_factory.mktemp('bad')
    # another architecture: a tiny Llama with another hidden size, with the zoo's tokenizer
    tiny_llama(hidden_size=32, vocab_size=512).save_pretrained(tmp / 'other_arch')
    for f in ('tokenizer.json', 'tokenizer_config.json'):
        shutil.copy(zoo / 'math' / f, tmp / 'other_arch' / f)
    # another vocabulary: the maths expert whose tokenizer numbers two tokens the other way round
    shutil.copytree(zoo / 'math', tmp / 'other_vocab')
    tok = json.loads((tmp / 'other_vocab' / 'tokenizer.json').read_text())
    v = tok['model']['vocab']
    a, b = [t for t, i in v.items() if i in (4, 5)]
    v[a], v[b] = v[b], v[a]
    (tmp / 'other_vocab' / 'tokenizer.json').write_text(json.dumps(tok))
    lines = [t.replace('\n', ' ') for t in texts]  # a text file holds one prompt per line
    (tmp / 'empty.txt').write_text('\n\n')
    (tmp / 'short.txt').write_text('\n'.join(lines[:5]) + '\n')
    (tmp / 'long.txt').write_text('\n'.join(lines[:11] + [' '.join(lines)]) + '\n')
    (tmp / 'huge.txt').write_text('\n'.join(lines[:11] + ['x = 3 + 4 ' * 10**6]) + '\n')  # 10 MB in one prompt
    (tmp / 'blank.jsonl').write_text(''.join(json.dumps(dict(question=t)) + '\n' for t in texts[:11] + ['  ']))
    (tmp / 'mine' / 'math').mkdir(parents=True)
    (tmp / 'mine' / 'math' / 'notes.txt').write_text('my notes')
    (tmp / 'theirs').mkdir()  # a folder of the user's: their summary and figure, where darts correct writes its own
    (tmp / 'theirs' / 'summary.md').write_text('my summary')
    (tmp / 'theirs' / 'diagnosis.png').write_bytes(b'my figure')
    if os.geteuid() == 0:  # root writes through permissions: a folder of the kernel's that nobody may write in
        (tmp / 'read-only').symlink_to('/sys')
    else:
        (tmp / 'read-only').mkdir()
        (tmp / 'read-only').chmod(0o555)
    (tmp / 'p.jsonl').write_text(''.join(json.dumps(dict(question=t)) + '\n' for t in texts))
    import datasets

    datasets.Dataset.from_dict({'question': texts}).save_to_disk(str(tmp / 'ds'))
    return tmp


def cases(zoo, merged, bad):
    "(what, library keywords, command-line arguments, the message's words): each refused before any model loads."
    math, code = zoo / 'math', zoo / 'code'
    small = dict(calib_n=8, n_held=4)
    cli_small = ['--n-calib', '8', '--n-held', '4']
    return (
        [
            (
                'an expert of another architecture',
                dict(experts={'math': bad / 'other_arch'}),
                ['--expert', f"math={bad / 'other_arch'}"],
                "experts['math']: expected a checkpoint whose architecture and vocabulary fit the merge",
            ),
            (
                'an expert whose vocabulary numbers tokens differently',
                dict(experts={'math': bad / 'other_vocab'}),
                ['--expert', f"math={bad / 'other_vocab'}"],
                'different ids',
            ),
            (
                'an expert that does not exist',
                dict(experts={'math': zoo / 'nope'}),
                ['--expert', f"math={zoo / 'nope'}"],
                "experts['math']: expected a checkpoint folder or a hub id in the local cache, got",
            ),
            (
                'a merge that does not exist',
                dict(merged=zoo / 'no-merge'),
                ['--merged', str(zoo / 'no-merge')],
                'merged: expected a checkpoint folder or a hub id in the local cache, got',
            ),
            (
                'a missing prompt file',
                dict(prompts=bad / 'missing.txt'),
                ['--prompts', str(bad / 'missing.txt')],
                "prompts['math']: expected an existing prompt file, got",
            ),
            (
                'an empty prompt file',
                dict(prompts=bad / 'empty.txt'),
                ['--prompts', str(bad / 'empty.txt')],
                "prompts['math']: expected at least one prompt, got none in file",
            ),
            (
                'a JSONL field that does not exist',
                dict(prompts=bad / 'p.jsonl', field='text'),
                ['--prompts', str(bad / 'p.jsonl'), '--field', 'text'],
                "field: expected a field of every record of",
            ),
            (
                'a JSONL file without a field',
                dict(prompts=bad / 'p.jsonl'),
                ['--prompts', str(bad / 'p.jsonl')],
                'field: expected the JSONL field that holds the prompt (--field), got None',
            ),
            (
                'an empty prompt in a JSONL file',
                dict(prompts=bad / 'blank.jsonl', field='question'),
                ['--prompts', str(bad / 'blank.jsonl'), '--field', 'question'],
                "prompts['math']: expected prompts with text, got 1 empty one(s) in file",
            ),
            (
                'a dataset field that does not exist',
                dict(prompts=bad / 'ds', field='text'),
                ['--prompts', str(bad / 'ds'), '--field', 'text'],
                "field: expected a column of",
            ),
            (
                'a dataset that is neither a folder nor in the local cache',
                dict(prompts='no-such-org/no-such-dataset', field='text'),
                ['--prompts', 'no-such-org/no-such-dataset', '--field', 'text'],
                "prompts: expected a dataset folder or a dataset in the local cache, got 'no-such-org/no-such-dataset'",
            ),
            (
                'fewer prompts than asked',
                dict(prompts=bad / 'short.txt'),
                ['--prompts', str(bad / 'short.txt')],
                "prompts['math']: expected at least 12 prompts, got 5 in file",
            ),
            (
                "a prompt longer than the module's positions",
                dict(prompts=bad / 'long.txt', max_len=256),
                ['--prompts', str(bad / 'long.txt'), '--max-len', '256'],
                "prompts['math']: expected prompts of at most max_len=256 tokens (the module's positions), got",
            ),
            (
                'prompts for other experts than the ones given',
                dict(prompts={'code': bad / 'p.jsonl'}, field='question'),
                ['--prompts', f"code={bad / 'p.jsonl'}", '--field', 'question'],
                "prompts: expected one entry per expert ['math'], got ['code']",
            ),
            (
                'an expert without a domain name',
                None,
                ['--expert', str(math), str(code)],
                '--expert: expected DOMAIN=VALUE',
            ),
            (
                "an output folder whose module folder holds the user's files",
                dict(out_dir=bad / 'mine'),
                ['--out', str(bad / 'mine')],
                'out_dir: expected a new folder or an earlier output of darts correct, got',
            ),
            (
                'a rank of 0',
                dict(rank=0),
                ['--rank', '0'],
                'rank: expected an integer >= 1, got 0',
            ),
            # issue 38: refused only after the caches and the training, or never, before
            (
                'a prompt of 10 MB (tokenized whole, it took 2 GB and 40 s)',
                dict(prompts=bad / 'huge.txt'),
                ['--prompts', str(bad / 'huge.txt')],
                "['math']: expected prompts of at most max_len=512 tokens (the module's positions), got more than 512",
            ),
            (
                'the merge given as its own expert',
                dict(experts={'math': merged}),
                ['--expert', f'math={merged}'],
                "experts['math']: expected an expert whose weights differ from the merge's",
            ),
            (
                "a max_len past the merge's context (a position table of 10^8 rows)",
                dict(max_len=10**8),
                ['--max-len', '100000000'],
                "max_len: expected at most the merge's context length (max_position_embeddings=1024), got 100000000",
            ),
            (
                "a rank past the merge's hidden size",
                dict(rank=100000),
                ['--rank', '100000'],
                "rank: expected at most the merge's hidden size 64 (the module's bottleneck), got 100000",
            ),
            (
                'a mistyped lm-eval task',
                dict(tasks=['darts_mth']),
                ['--tasks', 'darts_mth'],
                "tasks: expected lm-eval task names (the package's, lm-eval's or include_path's), got 'darts_mth'",
            ),
            (
                "an expert named as another expert's export",
                dict(
                    experts={'math': math, 'math-corrected': code},
                    export=True,
                    prompts=bad / 'p.jsonl',
                    field='question',
                ),
                ['--expert', f'math={math}', f'math-corrected={code}', '--export', '--prompts', str(bad / 'p.jsonl')]
                + ['--field', 'question'],
                "experts: the domain name 'math-corrected' is the export of the expert 'math'",
            ),
            (
                'an export asked of a diagnosis, which trains nothing',
                dict(export=True, diagnose_only=True),
                ['--export', '--diagnose-only'],
                'export: expected False with diagnose_only=True',
            ),
            (
                "an output folder holding the user's own summary and figure",
                dict(out_dir=bad / 'theirs'),
                ['--out', str(bad / 'theirs')],
                "holds ['diagnosis.png', 'summary.md'] and is not an earlier output of darts correct",
            ),
            (
                'an output folder this user cannot write',
                dict(out_dir=bad / 'read-only' / 'out'),
                ['--out', str(bad / 'read-only' / 'out')],
                'out_dir: expected a folder this user can write, got',
            ),
        ],
        small,
        cli_small,
    )


@pytest.fixture
def no_model(monkeypatch):
    "Loading any causal LM fails the test: the checks must come first."

    def refuse(*a, **k):
        raise AssertionError('a model was loaded before the inputs were checked')

    monkeypatch.setattr(transformers.AutoModelForCausalLM, 'from_pretrained', refuse)


def test_bad_inputs(zoo, merged, bad, no_model, tmp_path):
    "Each bad input: a ValueError / FileNotFoundError naming it from the library, and exit 2 with one line at the CLI."
    table, small, cli_small = cases(zoo, merged, bad)
    for what, kw, argv, words in table:
        base = dict(merged=merged, experts={'math': zoo / 'math'}, **small)
        if kw is not None:
            with pytest.raises((ValueError, FileNotFoundError), match='.') as e:
                # the plan's checks, then the output folder's: all before any model loads (`no_model`)
                correct_merge(**{**base, 'out_dir': tmp_path / 'out', **kw}, progress=False)
                pytest.fail(f'not refused: {what}')
            assert words in str(e.value), (what, str(e.value))
        expert = [] if '--expert' in argv else ['--expert', f"math={zoo / 'math'}"]
        line = ['correct', '--merged', str(merged), *expert, *cli_small, '--out', str(tmp_path / 'out'), *argv]
        code, out, err = run_main(line)
        assert code == 2, (what, code, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, (what, err)
        assert lines[0].startswith('darts correct: error: '), (what, err)
        assert words in lines[0], (what, err)
    assert (bad / 'mine' / 'math' / 'notes.txt').read_text() == 'my notes'
    assert (bad / 'theirs' / 'summary.md').read_text() == 'my summary'
    assert (bad / 'theirs' / 'diagnosis.png').read_bytes() == b'my figure'
    assert not (tmp_path / 'out').exists()


def test_console_script_refuses_at_once(zoo, bad):
    "The installed entry point (a fresh process): one line on stderr, exit 2, for a prompt file that is missing."
    cmd = [sys.executable, '-m', 'darts_nb.cli', 'correct', '--merged', str(zoo / 'base'), '--expert']
    cmd += [f"math={zoo / 'math'}", '--prompts', str(bad / 'missing.txt')]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "prompts['math']: expected an existing prompt file" in r.stderr


def load_card(folder: Path) -> str:
    m = SurgeryModule.from_pretrained(folder)
    assert m.kind == 'position'
    assert m.hidden_size == 64
    return (folder / 'README.md').read_text()


def test_command_from_jsonl(zoo, merged, bad, tmp_path):
    "Two experts from one JSONL file: a module folder each, its card, the diagnosis, the held-out check."
    out = tmp_path / 'fixed'
    argv = ['correct', '--merged', str(merged), '--expert', f"math={zoo / 'math'}", f"code={zoo / 'code'}"]
    argv += ['--prompts', str(bad / 'p.jsonl'), '--field', 'question', '--n-calib', '8', '--n-held', '4']
    code, said, err = run_main(argv + ['--iters', '30', '--device', 'cpu', '--out', str(out)])
    assert code == 0, err[-2000:]
    assert 'math: the bias' in said, said
    assert 'code: the merge picks' in said, said
    assert f'written to {out}' in said, said
    for d in ('math', 'code'):
        card = load_card(out / d)
        assert f"calibration: trained on | the first 8 prompts of file {bad / 'p.jsonl'} (field question)" in card, card
        assert f"calibration: held out | the 4 prompts after the first 8 of file {bad / 'p.jsonl'}" in card, card
        assert 'held-out agreement with the expert (%), all positions' in card
        assert '| diagnosis 1 |' in card
        cfg = json.loads((out / d / 'surgery_config.json').read_text())
        assert cfg['domain'] == d, cfg
        assert cfg['expert'] == str(zoo / d), cfg
        assert cfg['rho_l1'] > 0, cfg
    assert (out / 'diagnosis.png').stat().st_size > 1000


def test_command_from_local_datasets(zoo, merged, texts, tmp_path):
    "save_to_disk's dataset (train split; held out: its test split), exported too; and a folder of JSON data files."
    import datasets

    ds = datasets.DatasetDict(
        train=datasets.Dataset.from_dict({'text': texts[:8]}), test=datasets.Dataset.from_dict({'text': texts[8:]})
    )
    ds.save_to_disk(str(tmp_path / 'saved'))
    out = tmp_path / 'fixed'
    argv = [
        'correct',
        '--merged',
        str(merged),
        '--expert',
        f"math={zoo / 'math'}",
        '--prompts',
        str(tmp_path / 'saved'),
    ]
    argv += ['--field', 'text', '--split', 'train', '--held-out-split', 'test', '--n-calib', '8', '--n-held', '4']
    code, said, err = run_main(argv + ['--iters', '10', '--export', '--out', str(out)])
    assert code == 0, err[-2000:]
    card = load_card(out / 'math')
    exported = json.loads((out / 'math-corrected' / 'config.json').read_text())
    assert exported['auto_map'] == {'AutoModelForCausalLM': 'modeling_darts.DartsForCausalLM'}, exported
    same = (out / 'math-corrected' / 'darts_surgery' / 'surgery_model.safetensors').read_bytes()
    assert same == (out / 'math' / 'surgery_model.safetensors').read_bytes()  # the module checked is the one built in
    # issue 38: the export carries the module's provenance and scores, in its card and its config
    exported_card = (out / 'math-corrected' / 'README.md').read_text()
    assert 'with its DARTS module for math built in' in exported_card, exported_card
    assert 'not recorded' not in exported_card and '(none recorded)' not in exported_card, exported_card
    assert 'held-out agreement with the expert (%), all positions' in exported_card, exported_card
    built_in = json.loads((out / 'math-corrected' / 'darts_surgery' / 'surgery_config.json').read_text())
    module_cfg = json.loads((out / 'math' / 'surgery_config.json').read_text())
    for k in ('domain', 'expert', 'merged_model', 'loss', 'seed', 'rho_l1', 'scores'):
        assert built_in[k] == module_cfg[k] not in (None, '', {}), (k, built_in.get(k), module_cfg.get(k))
    assert (
        f"calibration: held out | the first 4 prompts of dataset {tmp_path / 'saved'} (split test, field text)" in card
    ), card
    # a folder of data files, read by datasets' json builder (offline)
    (tmp_path / 'files').mkdir()
    (tmp_path / 'files' / 'train.jsonl').write_text(''.join(json.dumps(dict(text=t)) + '\n' for t in texts))
    got, what = read_prompts(tmp_path / 'files', field='text', split='train', n=12)
    assert got == texts
    assert what == f"dataset {tmp_path / 'files'} (split train, field text)"


def test_diagnose_only(zoo, merged, tmp_path):
    "--diagnose-only: the diagnosis (table, sentences, figure), no module trained, nothing else written."
    out = tmp_path / 'diag'
    argv = ['correct', '--merged', str(merged), '--expert', f"math={zoo / 'math'}", '--diagnose-only']
    code, said, err = run_main(argv + ['--n-calib', '8', '--out', str(out)])
    assert code == 0, err[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ['darts_correct.json', 'diagnosis.png', 'summary.md']
    summary = (out / 'summary.md').read_text()
    assert 'head_distance' in summary
    assert 'oracle' in summary
    assert 'math: the merge picks the expert' in summary


def test_same_module_from_the_function(zoo, merged, texts, tmp_path):
    "The function and the command train the same module from the same inputs (options by object or keyword)."
    from darts_nb.correct import CorrectOptions

    a = correct_merge(
        merged, {'math': zoo / 'math'}, texts, out_dir=tmp_path / 'a', iters=10, calib_n=8, n_held=4, progress=False
    )
    opts = CorrectOptions(iters=10, calib_n=8, n_held=4)
    b = correct_merge(merged, {'math': zoo / 'math'}, texts, out_dir=tmp_path / 'b', options=opts, progress=False)
    assert a.held_rho_l1[0] == b.held_rho_l1[0]
    wa = (tmp_path / 'a' / 'math' / 'surgery_model.safetensors').read_bytes()
    assert wa == (tmp_path / 'b' / 'math' / 'surgery_model.safetensors').read_bytes()


TASK_YAML = """task: my_sums
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: loglikelihood
doc_to_text: "{{{{query}}}}"
doc_to_target: "{{{{target}}}}"
target_delimiter: ""
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def test_user_task_scored_without_and_with(zoo, merged, bad, tmp_path):
    "A task YAML of the user's (include_path, a limit of a few items): the merge without and with the module, paired."
    from darts_nb.domains import export_jsonl

    tasks = tmp_path / 'tasks'
    tasks.mkdir()
    data = export_jsonl('math', 'eval', tmp_path / 'items.jsonl', seed=0)
    (tasks / 'my_sums.yaml').write_text(TASK_YAML.format(data=data))
    out = tmp_path / 'fixed'
    argv = ['correct', '--merged', str(merged), '--expert', f"math={zoo / 'math'}", '--n-calib', '8', '--n-held', '4']
    argv += ['--iters', '30', '--tasks', 'my_sums', '--include-path', str(tasks), '--limit', '5', '--out', str(out)]
    code, said, err = run_main(argv)
    assert code == 0, err[-3000:]
    import pandas as pd

    got = pd.read_csv(out / 'tasks.csv')
    assert list(got[['domain', 'task', 'metric', 'n']].iloc[0]) == ['math', 'my_sums', 'acc', 5], got
    r = got.iloc[0]
    assert abs(r['diff'] - (r.with_module - r.without)) < 1e-9
    assert r.lo <= r['diff'] <= r.hi
    assert (
        'my_sums acc (n=5): without, with the module, difference [95% CI]' in (out / 'math' / 'README.md').read_text()
    )
    assert 'my_sums' in said


def test_all_modules_on_one_model(zoo, merged, bad, tmp_path):
    "Both modules of a correction on one loaded merge, one picked per request; none: the plain merge."
    import torch
    from darts_nb.correct import attach_corrections
    from darts_nb.surgery import surgery, surgery_of
    from darts_nb.zoo import load_model

    out = tmp_path / 'fixed'
    experts = {'math': zoo / 'math', 'code': zoo / 'code'}
    correct_merge(
        merged, experts, bad / 'p.jsonl', out_dir=out, field='question', iters=20, calib_n=8, n_held=4, progress=False
    )
    model, tok = load_model(merged, device='cpu')
    assert sorted(attach_corrections(model, out)) == ['code', 'math']
    assert surgery_of(model) is None
    ids = tok(['Question: Bob has 2 cards.'], return_tensors='pt')
    plain = model(**ids).logits
    got = {}
    for d in ('math', 'code'):
        with surgery(model, d):
            got[d] = model(**ids).logits
    assert not torch.equal(got['math'], got['code'])
    assert not torch.equal(got['math'], plain)
    assert torch.equal(model(**ids).logits, plain)


def test_help_shows_the_example_and_the_papers_defaults():
    "darts correct --help: its example and every option's default (the paper's), without importing the library."
    code, out, _ = run_main(['correct', '--help'])
    assert code == 0, out
    assert 'example:\n  darts correct' in out, out
    for default in ('(default: position)', '(default: ewl1)', '(default: 16)', '(default: 500)', '(default: 0.001)'):
        assert default in out, (default, out)
    probe = "import sys; from darts_nb.cli import _parser; _parser(); "
    probe += "print([m for m in ('torch', 'pandas') if m in sys.modules])"
    r = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True)
    assert r.stdout.strip() == '[]', r.stdout + r.stderr


def test_hub_ids_from_the_local_cache(zoo, merged, texts, tmp_path, monkeypatch):
    "The merge, an expert and the prompts named by hub id, found offline in the local hub cache (a rehearsed cache)."
    from darts_nb.rehearsal import hub_put

    cache = tmp_path / 'hub'
    monkeypatch.setenv('HF_HUB_CACHE', str(cache))
    hub_put(cache, 'me/my-merge', merged)
    hub_put(cache, 'org/math-expert', zoo / 'math')
    (tmp_path / 'data').mkdir()
    (tmp_path / 'data' / 'train.jsonl').write_text(''.join(json.dumps(dict(q=t)) + '\n' for t in texts))
    hub_put(cache, 'me/my-prompts', tmp_path / 'data', repo_type='dataset')
    out = tmp_path / 'fixed'
    argv = ['correct', '--merged', 'me/my-merge', '--expert', 'math=org/math-expert', '--prompts', 'me/my-prompts']
    code, said, err = run_main(
        argv + ['--field', 'q', '--n-calib', '8', '--n-held', '4', '--iters', '5', '--out', str(out)]
    )
    assert code == 0, err[-2000:]
    cfg = json.loads((out / 'math' / 'surgery_config.json').read_text())
    assert (cfg['merged_model'], cfg['expert']) == ('me/my-merge', 'org/math-expert'), cfg
    assert (
        'calibration: trained on | the first 8 prompts of dataset me/my-prompts (split train, field q)'
        in (out / 'math' / 'README.md').read_text()
    )
    code, _, err = run_main(argv[:3] + ['--expert', 'math=org/not-fetched'])
    assert code == 2, err
    assert "experts['math']: expected a checkpoint folder or a hub id in the local cache" in err, err
