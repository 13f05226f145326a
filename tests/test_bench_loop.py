"bench/bench_loop.py --tiny on the CPU: it finishes and prints the loop ratio, with identical loss histories."

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_loop_tiny():
    env = {**os.environ, 'HF_HUB_OFFLINE': '1', 'HF_DATASETS_OFFLINE': '1'}
    r = subprocess.run(
        [sys.executable, 'bench/bench_loop.py', '--tiny', '--device', 'cpu'],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith('tiny'))
    ratio = re.search(r'loop ratio (\d+\.\d+)x \(median of 3, range (\d+\.\d+)-(\d+\.\d+)', line)
    assert ratio, line
    lo, mid, hi = float(ratio[2]), float(ratio[1]), float(ratio[3])
    assert 0 < lo <= mid <= hi, line
    assert 'max |loss diff| 0.0e+00' in line, line  # the same maths: the same losses, bit for bit
