"""The overhead of Ray on one machine (issue 18: target at most 1.3x): the quick programme of the ci zoo, from
scratch (merges, caches, scores, arms), once with the `local` executor and once with `ray`, each with the same
number of workers, each in a fresh DARTS_HOME holding a copy of the ci zoo; prints both wall times and their ratio.
usage: python bench/bench_ray.py [--workers 2] [--only experts sweep main] [--eval-limit 60]"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CODE = """import sys
from darts_nb.experiments import run_all
ex, workers, limit, only = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
run_all(
    'ci', 'bench-' + ex, quick=True, only=only or None, eval_limit=limit, report=False, workers=workers, executor=ex
)"""


def wall(executor: str, zoo: Path, a) -> float:
    "Seconds of one run of the programme in a fresh DARTS_HOME (a subprocess: Ray's start and stop included)."
    with tempfile.TemporaryDirectory() as home:
        shutil.copytree(zoo, Path(home) / 'zoo-ci')
        env = {
            **os.environ,
            'DARTS_HOME': home,
            'HF_HUB_OFFLINE': '1',
            'HF_DATASETS_OFFLINE': '1',
            'TOKENIZERS_PARALLELISM': 'false',
        }
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, '-c', CODE, executor, str(a.workers), str(a.eval_limit), *a.only],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--eval-limit', type=int, default=60)
    ap.add_argument(
        '--only',
        nargs='*',
        default=['experts', 'sweep', 'main'],
        help='experiments (none given: the whole quick programme)',
    )
    a = ap.parse_args()
    from darts_nb.zoo import build_zoo, zoo_dir

    build_zoo('ci')
    zoo = zoo_dir('ci')
    local = wall('local', zoo, a)
    on_ray = wall('ray', zoo, a)
    print(
        f"quick ci programme ({' '.join(a.only) or 'all'}; {a.eval_limit} eval items; {a.workers} workers): "
        f"local {local:.1f} s, ray {on_ray:.1f} s, ratio {on_ray / local:.2f}x (target at most 1.3x)"
    )


if __name__ == '__main__':
    main()
