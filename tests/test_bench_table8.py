"bench/bench_table8.py --tiny on the CPU: it finishes, and its CSV/JSON hold every Table 8 phase for both kinds."

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from darts_nb.cost import COST_PHASES, COST_KINDS

ROOT = Path(__file__).resolve().parent.parent


def test_bench_table8_tiny(tmp_path):
    env = {**os.environ, 'HF_HUB_OFFLINE': '1', 'HF_DATASETS_OFFLINE': '1', 'TOKENIZERS_PARALLELISM': 'false'}
    r = subprocess.run(
        [
            sys.executable,
            'bench/bench_table8.py',
            '--tiny',
            '--device',
            'cpu',
            '--out',
            str(tmp_path / 'out'),
            '--workdir',
            str(tmp_path / 'work'),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert 'Table 8 on CPU' in r.stdout
    assert not (tmp_path / 'work' / 'merged').exists()
    assert not (tmp_path / 'work' / 'target').exists()  # cleaned up without --keep
    res = json.loads((tmp_path / 'out' / 'table8.json').read_text())
    s, H = res['settings'], res['configs']['merged']['hidden_size']
    got = {(m['kind'], m['phase']): m for m in res['measured']}
    for kind in COST_KINDS:
        for phase in COST_PHASES:
            assert (kind, phase) in got, (kind, phase)
            m = got[kind, phase]
            assert math.isfinite(m['value']), m
            assert m['value'] > 0, m
        g = res['generate'][kind]
        assert g['plain'] > 0
        assert g['attached'] > 0
        assert g['ratio'] > 0
    par = {k: got[k, 'surgery_params']['value'] for k in COST_KINDS}
    assert par['position'] > par['standard']
    assert par['standard'] == 2 * H * s['rank']
    assert par['position'] == 2 * H * s['rank'] + s['max_len'] * H  # W_down, W_up (+ b)
    # HiddenCache.nbytes: every prompt fills T = max_len tokens; per position h^M and h^k in bf16 (2 x 2H bytes),
    # the float32 entropy (4), the bool mask (1) and the int64 ids (8). At 7B: 50 * 512 * (4 * 4096 + 13) = 0.42 GB.
    for kind in COST_KINDS:
        assert got[kind, 'cache']['value'] == s['prompts'] * s['max_len'] * (2 * 2 * H + 4 + 1 + 8)
    # the printed table: Table 8's rows, the generation rows, measured and paper columns
    rows = list(csv.reader(open(tmp_path / 'out' / 'table8.csv')))
    assert rows[0] == ['phase', 'Standard', 'DARTS', 'Standard (paper)', 'DARTS (paper)']
    labels = [r[0] for r in rows[1:]]
    want = {**COST_PHASES, 'train': f"training loop ({s['iters']} it)", 'peak_memory': 'peak memory (CPU RSS growth)'}
    assert labels[: len(COST_PHASES)] == [want[p] for p in COST_PHASES]
    assert len(labels) == len(COST_PHASES) + 3
    assert all(all(c for c in r) for r in rows[1:])
    assert {r[0]: r[3] for r in rows[1:]}['total wall-clock'] == '11.01 s'
