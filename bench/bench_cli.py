"""How quickly the `darts` command answers when it has no work to do (issue 16: under a second): `darts --help`,
`darts --version` and `darts report nosuchrun`, each the median of `--repeats` fresh processes, beside a bare
`python -c pass` measured in the same run (the ratio is what the command adds to starting Python).
usage: python bench/bench_cli.py [--repeats N]"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def seconds(argv: list, env: dict, repeats: int) -> float:
    "Median wall-clock seconds of `repeats` fresh runs of `argv`."
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run(argv, capture_output=True, env=env)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--repeats', type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, 'DARTS_HOME': home, 'HF_HUB_OFFLINE': '1'}
        bare = seconds([sys.executable, '-c', 'pass'], env, a.repeats)
        for args in (['--help'], ['--version'], ['report', 'nosuchrun']):
            t = seconds([sys.executable, '-m', 'darts_nb.cli', *args], env, a.repeats)
            ratio = f'{t / bare:4.1f}x a bare `python -c pass`, {bare:.3f} s; target < 1 s'
            print(f"darts {' '.join(args):<18} {t:6.3f} s  ({ratio})")


if __name__ == '__main__':
    main()
