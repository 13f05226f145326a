"""One model in memory at a time (issue 27): the cache stage and an arm never hold two models, and the memory
benchmark runs at its smallest size (its peaks are printed, never asserted: the ratio target is the benchmark's).

What would fail here: `get_or_build_cache` or `arm_job` loading a model while another is still alive (a model kept
by a name, by `Run`'s slot or by a reference cycle until the next collection), a cache built one model at a time
that differs from the side-by-side one, and a benchmark that does not run or whose printed ratio is not its own
measurements'."""

import json
import os
import subprocess
import sys
import weakref
from dataclasses import replace
from pathlib import Path
import pytest
import torch
import darts_nb.runs as runs_mod
import darts_nb.checkpoints as checkpoints_mod
from darts_nb.cache import build_cache, get_or_build_cache, CacheSettings
from darts_nb.zoo import build_zoo, load_model

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ['def add(a, b):', 'Ann has 3 apples and buys 2 more. How many apples?', 'Write a poem about the sun.']


class Spy:
    "Wraps `load_model`: at each load, which models it loaded earlier are still alive (no collection of its own)."

    def __init__(self, real):
        self.real, self.refs, self.alive_at_load, self.paths = real, [], [], []

    def __call__(self, path, device=None, dtype=None):
        self.alive_at_load.append([Path(p).name for r, p in self.refs if r() is not None])
        model, tok = self.real(path, device=device, dtype=dtype)
        self.refs.append((weakref.ref(model), path))
        self.paths.append(Path(path).name)
        return model, tok


def test_get_or_build_cache_holds_one_model_at_a_time(tmp_path, monkeypatch):
    zoo = build_zoo('ci')
    spy = Spy(checkpoints_mod.load_model)
    monkeypatch.setattr(checkpoints_mod, "load_model", spy)  # get_or_build_cache's default loader
    c = get_or_build_cache(
        zoo['base'],
        zoo['code'],
        PROMPTS,
        settings=CacheSettings(max_len=16),
        device='cpu',
        root=tmp_path,
        progress=False,
    )
    assert spy.paths == ['base', 'code']
    assert spy.alive_at_load == [[], []]  # the merged model was gone before the expert was loaded
    monkeypatch.undo()
    (base, tok), (code, _) = load_model(zoo['base'], device='cpu'), load_model(zoo['code'], device='cpu')
    both = build_cache(
        base, code, tok, PROMPTS, settings=CacheSettings(max_len=16), device='cpu', progress=False
    )  # side by side
    for k in ('merged', 'target', 'entropy', 'mask', 'ids'):
        assert torch.equal(getattr(c, k), getattr(both, k)), k


def test_arm_job_holds_one_model_at_a_time(tmp_path, monkeypatch):
    "An arm whose caches are not built yet: the expert (for its head), the caches, then the merged model to evaluate."
    run = runs_mod.make_run('ci', 'test-one-model', quick=True, eval_limit=2, shared_dir=str(tmp_path))
    runs_mod.need_merge(run, 'ta-0.5')  # the merge first: mergekit is not a model load
    spy = Spy(runs_mod.load_model)
    monkeypatch.setattr(runs_mod, 'load_model', spy)
    out = runs_mod.arm_job(run, 'ta-0.5', 'math', replace(runs_mod.DARTS, iters=3))
    assert spy.alive_at_load, list(zip(spy.paths, spy.alive_at_load))
    assert all(a == [] for a in spy.alive_at_load), list(zip(spy.paths, spy.alive_at_load))
    # the head, then each cache (merged, expert), then the merged model for the evaluation
    assert spy.paths == ['math', 'ta-0.5', 'math', 'ta-0.5', 'math', 'ta-0.5'], spy.paths
    assert {'rho_l1', 'argmax_agree', 'final_loss'} <= {r['metric'] for r in out['rows']}
    head = run.head(run.profile.experts['math'])
    assert tuple(head.shape) == (512, 64)
    assert not head.requires_grad  # kept while the merged model is loaded
    run.release()


def _bench(tmp_path, *args):
    env = {**os.environ, 'HF_HUB_OFFLINE': '1', 'TOKENIZERS_PARALLELISM': 'false'}
    out = tmp_path / 'mem.json'
    r = subprocess.run(
        [sys.executable, 'bench/bench_cache_memory.py', '--shape', 'tiny', '--device', 'cpu', '--out', str(out), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout, json.loads(out.read_text())


def test_bench_cache_memory_tiny(tmp_path):
    stdout, res = _bench(tmp_path)
    for v in ('side-by-side', 'one-at-a-time', 'calibration'):
        assert f'{v:14s} peak ' in stdout, v
        r = res['results'][v]
        assert r['peak'] > r['base'] > 0
        assert r['reserved'] is None  # CPU: the process's resident high-water mark
    assert res['caches'] == {'identical': True, 'max_abs_diff': 0.0}
    ratio = res['results']['one-at-a-time']['peak'] / res['results']['side-by-side']['peak']
    assert res['ratio'] == pytest.approx(ratio)
    assert f'ratio one-at-a-time / side-by-side: {ratio:.2f}' in stdout
    assert res['settings'] == dict(prompts=8, max_len=32, batch_size=8, iters=5, loss='ewl1')
    assert res['dtype'] == 'float32'
    assert res['plan']['one_at_a_time'] < res['plan']['side_by_side']


def test_bench_cache_memory_bf16_on_cpu(tmp_path):
    "The GPU's dtype (bfloat16) through the same code on a CPU: the same cache both ways."
    stdout, res = _bench(tmp_path, '--dtype', 'bfloat16', '--only', 'side-by-side', 'one-at-a-time')
    assert res['dtype'] == 'bfloat16'
    assert set(res['results']) == {'side-by-side', 'one-at-a-time'}
    assert res['caches']['identical'], res['caches']
    assert 'the plan assumes float32 on cpu' in stdout
