"bench/bench_engine.py, a short toy sweep on the CPU: it finishes and its JSON holds every number, each positive."

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from darts_nb.engine import vllm_missing

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(vllm_missing() is not None, reason=f'{vllm_missing()}')


def test_bench_engine_smoke(tmp_path):
    env = {**os.environ, 'HF_HUB_OFFLINE': '1', 'HF_DATASETS_OFFLINE': '1', 'TOKENIZERS_PARALLELISM': 'false'}
    out = tmp_path / 'bench.json'
    cmd = [
        sys.executable,
        'bench/bench_engine.py',
        '--merges',
        '2',
        '--eval-limit',
        '8',
        '--no-smol',
        '--out',
        str(out),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert 'toy, sweep of 2 merges' in r.stdout
    res = json.loads(out.read_text())
    toy = res['toy']
    assert len(toy['merges']) == 2
    for key in ('start_s', 'import_s', 'engine_for_s'):
        assert toy['start'][key] > 0, key
    for key in (
        'hf_sweep_s',
        'vllm_sweep_s',
        'sweep_ratio',
        'hf_per_merge_s',
        'vllm_per_merge_s',
        'hf_eval_s',
        'vllm_eval_s',
        'hf_tokens_per_s',
        'vllm_tokens_per_s',
        'swap_s',
        'identical',
    ):
        assert toy[key] > 0, key
    assert toy['break_even'] is None or toy['break_even'] >= 1
    for m in toy['merges']:
        assert m['build_s'] > 0 and m['swap_s'] > 0 and 0 < m['identical'] <= 1
        for engine in ('hf', 'vllm'):
            run = m[engine]
            for key in ('seconds', 'generate_s', 'calls', 'tokens', 'tokens_per_s'):
                assert run[key] > 0, (engine, key)
            assert run['generate_s'] < run['seconds']
    assert res['smol'] == {'skipped': '--no-smol'}
