"""A careless practitioner's inputs to `darts correct` and `darts lm-eval` (issue 38): each is one clear error naming
the argument, the value and what was expected (at the command line: one line and exit status 2, no traceback), or is
read as meant. No training: every case stops before a module is trained, or never gets that far."""

import json
import pickle
import shutil
from pathlib import Path
import pytest
import torch
from safetensors.torch import load_file
from darts_nb.cache import get_or_build_cache
from darts_nb.checkpoints import check_compatible, load_model, tensor_shapes
from darts_nb.correct import plan_correction
from darts_nb.hub import NotFetched, resolve_models
from darts_nb.lm_eval import darts_model_class
from darts_nb.prompts import read_prompts
from darts_nb.triage import diagnose_pair, diagnosis_lines, head_shift, lm_head_weight
from test_bad_inputs_cli import run_main


@pytest.fixture(scope='module')
def texts():
    "Twelve prompts of the built-in maths domain, one line each."
    return [t.replace('\n', ' ') for t in read_prompts('math', n=12)[0]]


def said_once(code, err, cmd):
    "The command's error: exit status 2, one line `darts CMD: error: ...`, no traceback; its text."
    assert code == 2, err
    assert 'Traceback' not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f'darts {cmd}: error: '), err
    return lines[0]


def correct_argv(zoo, out, *argv):
    "`darts correct` on the ci zoo: its code expert taken as the merge, the maths expert as the expert."
    return ['correct', '--merged', str(zoo / 'code'), '--expert', f"math={zoo / 'math'}", '--out', str(out), *argv]


# 1. prompt files that are not UTF-8: the file, the argument and the byte named


@pytest.mark.parametrize('suffix', ['.txt', '.jsonl'])
def test_latin1_prompt_file_is_named(tmp_path, texts, suffix):
    lines = list(texts) if suffix == '.txt' else [json.dumps(dict(q=t), ensure_ascii=False) for t in texts]
    lines[3] = lines[3].replace('the', 'th\u00e9', 1) if 'the' in lines[3] else lines[3] + ' caf\u00e9'
    p = tmp_path / f'latin{suffix}'
    p.write_bytes('\n'.join(lines).encode('latin-1'))
    with pytest.raises(ValueError) as e:
        read_prompts(p, field='q', arg="prompts['math']")
    msg = str(e.value)
    for words in ("prompts['math']: expected UTF-8 text in", str(p), 'byte 0xe9 at offset', '(line 4)'):
        assert words in msg, msg
    assert "codec can't decode" not in msg, msg


def test_latin1_prompt_file_at_the_command_line(tmp_path, zoo, texts):
    p = tmp_path / 'latin.txt'
    p.write_bytes(('\n'.join(texts) + '\ncaf\u00e9\n').encode('latin-1'))
    code, _, err = run_main(correct_argv(zoo, tmp_path / 'out', '--prompts', str(p), '--n-calib', '8', '--n-held', '4'))
    line = said_once(code, err, 'correct')
    assert f"prompts['math']: expected UTF-8 text in {p}" in line and '(line 13)' in line, line
    assert not (tmp_path / 'out' / 'math').exists()


# 2. a UTF-8 byte-order mark (Notepad's): dropped


def test_byte_order_mark_is_dropped(tmp_path, texts):
    (tmp_path / 'bom.txt').write_bytes(b'\xef\xbb\xbf' + '\n'.join(texts).encode('utf-8'))
    got, _ = read_prompts(tmp_path / 'bom.txt')
    assert got == texts, (got[0], texts[0])
    (tmp_path / 'bom.jsonl').write_bytes(b'\xef\xbb\xbf{"q": "first prompt"}\n{"q": "second"}\n')
    assert read_prompts(tmp_path / 'bom.jsonl', field='q')[0] == ['first prompt', 'second']


# 3. an expert saved as PyTorch .bin weights (no safetensors): read as it is


@pytest.fixture(scope='module')
def bin_expert(zoo, tmp_path_factory):
    "The ci zoo's maths expert re-saved as `pytorch_model.bin` (as transformers 4 saved it without safetensors)."
    d = tmp_path_factory.mktemp('bin') / 'math'
    shutil.copytree(zoo / 'math', d, ignore=shutil.ignore_patterns('*.safetensors'))
    torch.save(load_file(zoo / 'math' / 'model.safetensors'), d / 'pytorch_model.bin')
    assert not list(d.glob('*.safetensors'))
    return d


def test_bin_expert_is_read(zoo, bin_expert):
    assert torch.equal(lm_head_weight(bin_expert), lm_head_weight(zoo / 'math'))
    assert tensor_shapes(bin_expert) == tensor_shapes(zoo / 'math')
    assert head_shift(zoo / 'code', bin_expert).equals(head_shift(zoo / 'code', zoo / 'math'))
    check_compatible({'merged': zoo / 'code', 'math': bin_expert})
    model, _ = load_model(bin_expert, device='cpu')  # transformers reads it too
    assert torch.equal(model.lm_head.weight, lm_head_weight(zoo / 'math'))


def test_bin_expert_passes_the_plan(zoo, bin_expert):
    plan = plan_correction(zoo / 'code', {'math': bin_expert}, calib_n=8, n_held=4)
    assert plan.experts == {'math': bin_expert}


def test_bin_expert_of_another_shape_is_named(zoo, bin_expert, tmp_path):
    "The tensor shapes of a .bin expert are compared too (they were skipped: no safetensors headers)."
    d = tmp_path / 'narrow'
    shutil.copytree(bin_expert, d)
    sd = torch.load(d / 'pytorch_model.bin', weights_only=True)
    sd['model.norm.weight'] = sd['model.norm.weight'][:32]
    torch.save(sd, d / 'pytorch_model.bin')
    with pytest.raises(ValueError, match=r'in tensor model\.norm\.weight: shape \(32,\) != \(64,\)'):
        check_compatible({'merged': zoo / 'code', 'math': d})


class _Touch:
    "A pickle that creates a file when it is loaded unsafely."

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def test_bin_with_code_is_refused_unrun(zoo, tmp_path):
    d = tmp_path / 'evil'
    shutil.copytree(zoo / 'math', d, ignore=shutil.ignore_patterns('*.safetensors'))
    marker = tmp_path / 'ran'
    (d / 'pytorch_model.bin').write_bytes(pickle.dumps({'lm_head.weight': _Touch(marker)}))
    for read in (tensor_shapes, lm_head_weight):
        with pytest.raises(ValueError, match='pytorch_model.bin: expected PyTorch weights'):
            read(d)
    assert not marker.exists()


# 4. an expert identical to the merge: said so, and no advice that does not apply


def test_identical_expert_is_said_so(zoo, texts):
    cache = get_or_build_cache(zoo / 'math', zoo / 'math', texts[:4], device='cpu', progress=False)
    head = lm_head_weight(zoo / 'math')
    diag = diagnose_pair(cache, head, head, head_shift(zoo / 'math', zoo / 'math'))
    lines = diagnosis_lines(diag, 'math')
    said = ' '.join(lines)
    assert len(lines) == 1 and 'identical' in said and 'no bias to correct' in said, lines
    for wrong in ('longer prompts', 'too much', 'distance 0, 0'):
        assert wrong not in said, lines


def test_heads_at_distance_zero_never_differ_too_much(zoo, texts):
    cache = get_or_build_cache(zoo / 'code', zoo / 'math', texts[:4], device='cpu', progress=False)
    head = lm_head_weight(zoo / 'math')
    diag = diagnose_pair(cache, head, head, head_shift(zoo / 'math', zoo / 'math'))
    diag = dict(diag, agree=0.99, room=False)  # a merge close to the expert, its heads the expert's own
    said = ' '.join(diagnosis_lines(diag, 'math'))
    assert 'too much' not in said and 'little is left to correct' in said, said


# 5. a hub id that is not cached: advice that works for that id


@pytest.fixture
def empty_hub(tmp_path, monkeypatch):
    monkeypatch.setenv('HF_HUB_CACHE', str(tmp_path / 'hub'))
    return tmp_path / 'hub'


def test_uncached_hub_id_gets_advice_for_it(empty_hub):
    with pytest.raises(NotFetched) as e:
        resolve_models({'merged': 'someone/my-merge'})
    msg = str(e.value)
    assert '`hf download someone/my-merge`' in msg and str(empty_hub) in msg, msg
    assert 'darts fetch' not in msg, msg


def test_uncached_paper_model_gets_fetch(empty_hub):
    with pytest.raises(NotFetched) as e:
        resolve_models({'base': 'meta-llama/Llama-2-7b-hf', 'merged': 'someone/my-merge'})
    msg = str(e.value)
    assert '`darts fetch --profile llama2-7b` downloads meta-llama/Llama-2-7b-hf' in msg, msg
    assert '`hf download someone/my-merge`' in msg and 'hf download meta-llama' not in msg, msg


def test_uncached_merge_at_the_command_line(empty_hub, zoo, tmp_path):
    argv = correct_argv(zoo, tmp_path / 'out')
    argv[argv.index('--merged') + 1] = 'someone/my-merge'
    line = said_once(*run_main(argv)[::2], 'correct')
    assert "merged: expected a checkpoint folder or a hub id in the local cache, got 'someone/my-merge'" in line
    assert '`hf download someone/my-merge`' in line and 'darts fetch' not in line, line


# 6. `darts lm-eval` with a mistyped key or a space after the comma in --model_args


def lm_eval_argv(model_args):
    return ['lm-eval', 'run', '--model', 'darts', '--model_args', *model_args, '--tasks', 'darts_math', '--limit', '1']


def test_lm_eval_typo_key_is_named(zoo, tmp_path):
    line = said_once(*run_main(lm_eval_argv([f"pretrained={zoo / 'math'},surgey={tmp_path}"]))[::2], 'lm-eval')
    assert "no key 'surgey' (did you mean 'surgery'?)" in line and 'expected one of pretrained, surgery' in line


@pytest.mark.parametrize(
    'spaced', [['pretrained={m}, surgery={s}'], ['pretrained={m},', 'surgery={s}'], [' pretrained = {m} , surgery={s}']]
)
def test_lm_eval_spaces_after_commas_are_read(zoo, tmp_path, spaced):
    "The keys are read through the spaces: the (missing) module folder is what is refused, by its name."
    args = [a.format(m=zoo / 'math', s=tmp_path / 'no-module') for a in spaced]
    line = said_once(*run_main(lm_eval_argv(args))[::2], 'lm-eval')
    assert f"surgery: expected a module folder (surgery.save_surgery), got '{tmp_path / 'no-module'}'" in line, line


def test_darts_model_refuses_a_typo_before_loading(zoo):
    with pytest.raises(ValueError, match="no key 'surgey'"):
        darts_model_class()(pretrained=str(zoo / 'math'), surgey='x', device='cpu')
