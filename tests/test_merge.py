"Bad input, interruption and resumption for darts_nb.merge (the lessons in 09_merge cover the happy path)."

import json
import subprocess
import sys
import time
import pytest
from darts_nb.core import tiny_llama, write_json
from darts_nb.lease import host_id, lease_path
from darts_nb import merge
from darts_nb.merge import (
    sweep_configs,
    quick_configs,
    run_merges,
    check_models,
    ta_config,
    ties_config,
    is_finished,
    family,
    best_per_method,
)

DOMAINS = ('code', 'math', 'instruct')


@pytest.fixture(scope='module')
def models(tmp_path_factory):
    "A base and three experts (tiny random Llamas, different seeds), plus odd ones out."
    root = tmp_path_factory.mktemp('models')
    out = {}
    for i, r in enumerate(('base',) + DOMAINS):
        tiny_llama(seed=i).save_pretrained(root / r)
        out[r] = root / r
    tiny_llama(hidden_size=16, seed=5).save_pretrained(root / 'hidden16')
    out['hidden16'] = root / 'hidden16'
    tiny_llama(vocab_size=80, seed=6).save_pretrained(root / 'vocab80')
    out['vocab80'] = root / 'vocab80'
    tiny_llama(layers=3, seed=7).save_pretrained(root / 'layers3')
    out['layers3'] = root / 'layers3'
    return out


def experts(models, **swap):
    return {d: swap.get(d, models[d]) for d in DOMAINS}


BAD = [  # (case, how to break the expert dict / config, exception, message fragment)
    (
        'missing expert',
        lambda m: ta_config(m['base'], experts(m, math=m['base'].parent / 'nope'), 0.5),
        FileNotFoundError,
        'nope',
    ),
    (
        'hidden size',
        lambda m: ta_config(m['base'], experts(m, code=m['hidden16']), 0.5),
        ValueError,
        'config field hidden_size',
    ),
    (
        'vocabulary',
        lambda m: ta_config(m['vocab80'], experts(m), 0.5),
        ValueError,
        'config field vocab_size',
    ),  # experts with fewer tokens than the base
    ('layers', lambda m: ta_config(m['base'], experts(m, code=m['layers3']), 0.5), ValueError, 'num_hidden_layers'),
    (
        'method name',
        lambda m: {**ta_config(m['base'], experts(m), 0.5), 'merge_method': 'task_arithmatic'},
        ValueError,
        'not a mergekit method',
    ),
    (
        'relative path',
        lambda m: {**ta_config(m['base'], experts(m), 0.5), 'base_model': 'meta-llama/Llama-2-7b-hf'},
        ValueError,
        'relative',
    ),
    ('no models', lambda m: {'merge_method': 'linear', 'models': []}, ValueError, "'models' is missing"),
    (
        'bad field',
        lambda m: {**ta_config(m['base'], experts(m), 0.5), 'dtype': ['x']},
        ValueError,
        'not a valid mergekit configuration',
    ),
]


@pytest.mark.parametrize('case,make,exc,msg', BAD, ids=[b[0] for b in BAD])
def test_bad_input(models, tmp_path, case, make, exc, msg):
    with pytest.raises(exc, match=msg):
        run_merges({'x': make(models)}, tmp_path / 'out', device='cpu', progress=False)
    assert not (tmp_path / 'out' / 'x').exists()


def test_bad_name(models, tmp_path):
    with pytest.raises(ValueError, match='safe directory name'):
        run_merges({'../evil': ta_config(models['base'], experts(models), 0.5)}, tmp_path, device='cpu', progress=False)


def test_tensor_shape_named(models, tmp_path):
    "Same config.json fields but a tensor of another shape: the tensor name and both shapes are in the message."
    from safetensors.torch import load_file, save_file
    import shutil

    p = tmp_path / 'odd'
    shutil.copytree(models['code'], p)
    w = load_file(p / 'model.safetensors')
    w['lm_head.weight'] = w['lm_head.weight'][:-1]
    save_file(w, p / 'model.safetensors', metadata={'format': 'pt'})
    with pytest.raises(ValueError, match=r'tensor lm_head.weight: shape \(63, 32\)'):
        check_models([models['base'], p])


def test_tokenizer_vocab_differs(models, tmp_path):
    from darts_nb.zoo import train_tokenizer
    import shutil

    a, b = tmp_path / 'a', tmp_path / 'b'
    shutil.copytree(models['base'], a)
    shutil.copytree(models['code'], b)
    train_tokenizer(['alpha beta gamma'] * 10, vocab_size=270).save_pretrained(a)
    train_tokenizer(['one two three four'] * 10, vocab_size=270).save_pretrained(b)
    with pytest.raises(ValueError, match=r"lacks .* token\(s\) of .*vocabulary"):
        check_models([a, b])


def test_interrupted_merge_leaves_nothing_finished(models, tmp_path, monkeypatch):
    out = tmp_path / 'out'
    real = merge._merge_one

    def dies(mc, tmp, device, seed):
        (tmp / 'config.json').write_text('{}')
        (tmp / 'model.safetensors').write_bytes(b'partial')
        raise KeyboardInterrupt

    monkeypatch.setattr(merge, '_merge_one', dies)
    cfgs = {'ta-0.5': ta_config(models['base'], experts(models), 0.5)}
    with pytest.raises(KeyboardInterrupt):
        run_merges(cfgs, out, device='cpu', progress=False)
    assert not (out / 'ta-0.5').exists()
    assert not is_finished(out / 'ta-0.5')
    assert not list(out.glob('.ta-0.5.tmp-*'))
    # a killed process (SIGKILL: no cleanup) leaves a hidden temp dir and its lease; it never looks finished and is
    # swept, while another node's merge in progress (a pid unknown here, a recent heartbeat) is left alone
    dead = subprocess.run(
        [sys.executable, '-c', 'import os; print(os.getpid())'], capture_output=True, text=True
    ).stdout
    stale, busy = out / '.ta-0.5.tmp-999999-deadbeef', out / '.ta-0.7.tmp-4242-cafe'
    for t, host, pid in ((stale, host_id(), int(dead)), (busy, 'node-7/boot', 4242)):
        t.mkdir()
        (t / 'model.safetensors').write_bytes(b'partial')
        write_json(lease_path(t), dict(host=host, pid=pid, started=time.time(), heartbeat=time.time()))
    monkeypatch.setattr(merge, '_merge_one', real)
    res = run_merges(cfgs, out, device='cpu', progress=False)
    assert list(res.status) == ['done']
    assert is_finished(out / 'ta-0.5')
    assert not stale.exists()
    assert not lease_path(stale).exists()
    assert busy.exists()
    assert lease_path(busy).exists()
    assert not list(out.glob('.ta-0.5.tmp-*'))  # the finished merge's own lease went with it


def test_failure_recorded_and_sweep_goes_on(models, tmp_path, monkeypatch):
    out = tmp_path / 'out'
    real = merge._merge_one

    def flaky(mc, tmp, device, seed):
        if mc.merge_method == 'ties':
            raise RuntimeError('boom')
        return real(mc, tmp, device, seed)

    monkeypatch.setattr(merge, '_merge_one', flaky)
    cfgs = {
        'ties-w0.5-d0.3': ties_config(models['base'], experts(models), 0.5, 0.3),
        'ta-0.5': ta_config(models['base'], experts(models), 0.5),
    }
    res = run_merges(cfgs, out, device='cpu', progress=False)
    assert list(res.status) == ['failed', 'done']
    assert 'boom' in res.error[0]
    assert not (out / 'ties-w0.5-d0.3').exists()
    assert 'boom' in json.loads((out / '_failures.json').read_text())['ties-w0.5-d0.3']['error']
    monkeypatch.setattr(merge, '_merge_one', real)  # re-run: the failure is retried, the finished one skipped
    res = run_merges(cfgs, out, device='cpu', progress=False)
    assert list(res.status) == ['done', 'skipped']
    assert json.loads((out / '_failures.json').read_text()) == {}


def test_foreign_dir_is_not_skipped(models, tmp_path):
    out = tmp_path / 'out'
    (out / 'ta-0.5').mkdir(parents=True)
    res = run_merges({'ta-0.5': ta_config(models['base'], experts(models), 0.5)}, out, device='cpu', progress=False)
    assert list(res.status) == ['failed']
    assert 'not a finished merge' in res.error[0]


def test_changed_config_is_not_skipped(models, tmp_path):
    out = tmp_path / 'out'
    e = experts(models)
    run_merges({'m': ta_config(models['base'], e, 0.5)}, out, device='cpu', progress=False)
    res = run_merges({'m': ta_config(models['base'], e, 0.7)}, out, device='cpu', progress=False)
    assert list(res.status) == ['failed']
    assert 'not a finished merge of this configuration' in res.error[0]


def test_dare_reproducible(models, tmp_path):
    from safetensors.torch import load_file

    e = experts(models)
    c = merge.dare_config(models['base'], e, 'dare_ties', 0.5, 0.3)
    run_merges({'a': c, 'b': c}, tmp_path, device='cpu', seed=1, progress=False)
    run_merges({'c': c}, tmp_path, device='cpu', seed=2, progress=False)
    a, b, d = (load_file(tmp_path / n / 'model.safetensors') for n in 'abc')
    assert all((a[k] == b[k]).all() for k in a)
    assert any((a[k] != d[k]).any() for k in a)


def test_grid_and_helpers(models):
    g = sweep_configs(models['base'], experts(models))
    assert len(g) >= 124
    assert 'ta-0.5' in quick_configs(models['base'], experts(models))
    with pytest.raises(ValueError, match='not in the sweep grid'):
        quick_configs(models['base'], experts(models), names=('ta-0.55',))
    with pytest.raises(ValueError, match='experts is empty'):
        sweep_configs(models['base'], {})
    with pytest.raises(ValueError, match='not a sweep configuration name'):
        family('slerp-0.5')
    with pytest.raises(ValueError, match='needs columns'):
        import pandas as pd

        best_per_method(pd.DataFrame({'config': ['ta-0.5']}))
