"Hostile programs must score as failures, within the time limit, leaving no process and no file behind."

import os
import sys
import socket
import time
import threading
import secrets
import tempfile
import subprocess
import signal
import shutil
from pathlib import Path
import pytest
from darts_nb.sandbox import run_code, CodeResult, SandboxUnavailable

ROOT = Path(__file__).resolve().parents[1]  # the project tree: the program must not read or write it

T = 2.0  # the per-program timeout used here
SLACK = 2.5  # harness start-up + cleanup allowance on a loaded 2-core machine
TAG = secrets.token_hex(4)


def procs_of(uid):
    "pids of live (not zombie) processes whose real uid is `uid`."
    out = []
    for d in Path('/proc').iterdir():
        if not d.name.isdigit():
            continue
        try:
            st = (d / 'status').read_text()
        except OSError:
            continue
        f = dict(line.split(':', 1) for line in st.splitlines() if ':' in line)
        if int(f['Uid'].split()[0]) == uid and f['State'].split()[0] not in ('Z', 'X'):
            out.append(int(d.name))
    return out


def procs_with(marker):
    "pids whose command line contains `marker`."
    out = []
    for d in Path('/proc').iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / 'cmdline').read_bytes().replace(b'\0', b' ').decode()
        except OSError:
            continue
        if marker in cmd and 'pytest' not in cmd:
            out.append(int(d.name))
    return out


@pytest.fixture(autouse=True)
def nothing_left_on_disk():
    "Every test of this file: no sandbox directory of the caller's is left behind."
    before = set(Path(tempfile.gettempdir()).glob('darts_sbx_*'))
    yield
    assert set(Path(tempfile.gettempdir()).glob('darts_sbx_*')) <= before, 'a sandbox directory was left behind'


def check_contained(r: CodeResult, timeout=T):
    assert not r.passed, r
    assert r.status in ('failed', 'timeout', 'error', 'unsupported'), r.status
    assert r.seconds < timeout + SLACK, r.seconds
    if r.uid is not None and r.uid != os.getuid():
        assert procs_of(r.uid) == [], f'left running as uid {r.uid}'


def test_correct_program_passes():
    r = run_code('def inc(x): return x + 1\nN = 2\nprint("done")', tests='assert inc(1) == N', timeout=T)
    assert (r.passed, r.status) == (True, 'passed'), r
    assert r.stdout.strip() == 'done'
    r = run_code(
        'def inc(x): return x + 1\nassert inc(1) == 2', timeout=T
    )  # a program alone: what happened, no verdict
    assert (r.passed, r.status, r.returncode) == (False, 'exited', 0), r


def test_bad_input():
    with pytest.raises(TypeError, match='program'):
        run_code(b'assert True')
    with pytest.raises(ValueError, match='timeout'):
        run_code('assert True', timeout=0)


HOSTILE = {
    'infinite_loop': 'while True: pass',
    'sleep': 'import time; time.sleep(100)',
    'alloc_10gb': 'x = bytearray(10 * 2**30)\nassert len(x) > 0',
    'alloc_creeping': 'l = []\nwhile True: l.append(bytearray(2**24))',
    'syntax_error': 'def f(:\n    return 1\nassert f() == 1',
    'os_system_write': f"import os\nassert os.system('touch /work/main/darts_pwned_{TAG}') == 0",
    'wrong_answer': 'assert sum([1, 2]) == 4',
    'print_flood': 'while True: print("x" * 10000)',
}


@pytest.mark.parametrize('name', list(HOSTILE))
def test_hostile(name):
    r = run_code(HOSTILE[name], timeout=T)
    check_contained(r)
    assert len(r.stdout) < 20_000
    assert len(r.stderr) < 20_000
    assert not Path(f'/work/main/darts_pwned_{TAG}').exists()


WRONG = 'def inc(x): return x\n'  # a wrong solution; each forgery adds a way to make an in-process harness say "pass"
FORGERIES = {
    'sys.exit(0) before the asserts': WRONG + 'import sys\nsys.exit(0)\n',
    'os._exit(0) before the asserts': WRONG + 'import os\nos._exit(0)\n',
    'SystemExit(0) in finally': WRONG + 'try:\n    assert inc(1) == 2\nfinally:\n    raise SystemExit(0)\n',
    'printed marker': WRONG + "print('__DARTS_PASS_' + '0' * 32 + '__')\nprint('passed')\n",
    'markers from its own code objects': WRONG
    + 'import sys, gc\nfor o in gc.get_objects():\n    if type(o).__name__ == "code": print(o.co_consts)\n',
    'excepthook': WRONG + 'import sys\nsys.excepthook = lambda *a: print("passed")\n',
    'always-equal result': 'class A:\n    def __eq__(self, o): return True\ndef inc(x): return A()\n',
    'patched AssertionError': WRONG + 'import builtins\nbuiltins.AssertionError = type("Quiet", (Exception,), {})\n',
    'patched builtins the tests use': WRONG
    + 'import builtins\nbuiltins.abs = lambda x: 0\nbuiltins.isinstance = lambda *a: True\n',
    'a plain value named like the expected one': WRONG + 'EXPECTED = 999\n',
    'builtins shadowed by its own names': WRONG
    + 'def abs(x): return 2\ndef isinstance(*a): return True\nEXPECTED = 1\n',
    'answers on every pipe': WRONG
    + 'import os\nfor fd in range(3, 64):\n    try: os.write(fd, b\'{"ok": 2}\\n\')\n    except OSError: pass\n',
}
TESTS = 'assert abs(inc(-3)) == 2\nEXPECTED = 2\nassert inc(1) == EXPECTED\nassert isinstance(inc(5), int)'


def test_tests_pass_for_the_right_program():
    r = run_code('def inc(x): return x + 1\n', tests=TESTS, timeout=T)
    assert r.passed, r
    assert r.status == 'passed', r


@pytest.mark.parametrize('name', list(FORGERIES))
def test_forgery_does_not_pass(name):
    "The verdict is the checker's: the tests run here, against plain data the program returns."
    r = run_code(FORGERIES[name], tests=TESTS, timeout=T)
    check_contained(r)
    assert 'passed' not in (r.status, r.detail)


def test_timeout_status():
    r = run_code('while True: pass', timeout=1)
    assert r.status == 'timeout'
    assert r.returncode is None
    assert 1 <= r.seconds < 1 + SLACK


def layers():
    return run_code('assert True', timeout=T).sandbox


def test_layers_reported():
    ls = layers()
    assert 'rlimits' in ls
    if os.geteuid() == 0:
        assert {'uid', 'nproc'} <= set(ls), ls  # root always drops to a fresh uid


@pytest.mark.parametrize('where', ['/work/main', '/root', '/tmp', '/var/tmp', '/dev/shm', str(Path.home())])
def test_no_write_outside_workdir(where):
    if where in ('/tmp', '/var/tmp', '/dev/shm') and 'landlock-fs' not in layers():
        pytest.skip(f'{where} is world-writable and this kernel has no Landlock: writes there are not blocked')
    target = Path(where) / f'darts_sbx_escape_{TAG}'
    # the program swallows the error and exits 0: the file must still not exist
    r = run_code(
        f"try: open({str(target)!r}, 'w').write('x')\nexcept Exception as e: print(type(e).__name__)", timeout=T
    )
    assert not target.exists(), f'{target} was written'
    inside = '' if where == '/tmp' else None  # the run's own /tmp is its scratch directory: writable, gone afterwards
    assert r.status == 'exited', r
    assert r.stdout.strip() in ('PermissionError', 'FileNotFoundError', 'OSError', inside), r
    r = run_code(f"open({str(target)!r}, 'w').write('x')", timeout=T)
    if inside is None:
        check_contained(r)
    assert not target.exists()


def sbx_dirs():
    return set(Path(tempfile.gettempdir()).glob('darts_sbx_*'))


def test_workdir_is_writable_and_removed():
    before = sbx_dirs()
    r = run_code(
        "import os\nopen('f.txt', 'w').write('x')\nassert open('f.txt').read() == 'x'\nprint(os.getcwd())", timeout=T
    )
    assert r.status == 'exited', r
    assert sbx_dirs() <= before


def test_scratch_total_is_limited():
    "20 files of 15 MB each (each under the per-file limit) do not fit: the scratch directory is a 64 MB tmpfs."
    before = sbx_dirs()
    prog = (
        "n = 0\ntry:\n    for i in range(20):\n        open(f'f{i}', 'wb').write(b'x' * (15 << 20)); n += 1\n"
        "finally: print(n)\nassert n == 20"
    )
    r = run_code(prog, timeout=T)
    assert 'scratch' in r.sandbox, r.sandbox
    check_contained(r)
    assert int(r.stdout.strip()) <= 64 // 15, r.stdout
    assert sbx_dirs() <= before


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv('DARTS_JUDGE_API_KEY', 'sk-fake-secret-123')
    r = run_code("import os\nassert 'sk-fake-secret-123' in repr(dict(os.environ))", timeout=T)
    check_contained(r)
    # nor through the parent's /proc entry
    r = run_code(f"assert b'sk-fake' in open('/proc/{os.getpid()}/environ', 'rb').read()", timeout=T)
    check_contained(r)
    assert 'sk-fake' not in r.stdout + r.stderr


def test_network_is_blocked():
    if not {'netns', 'landlock-net'} & set(layers()):
        pytest.skip('no network namespace and no Landlock TCP rules here')
    srv = socket.socket()
    srv.bind(('127.0.0.1', 0))
    srv.listen(4)
    port = srv.getsockname()[1]
    srv.settimeout(T + SLACK)
    got = []

    def accept():
        try:
            got.append(srv.accept())
        except OSError:
            pass

    th = threading.Thread(target=accept, daemon=True)
    th.start()
    r = run_code(
        f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\ns.sendall(b'hi')", timeout=T
    )
    check_contained(r)
    th.join(0.5)
    srv.close()
    assert got == [], 'the sandboxed program reached a socket on the host'


def test_background_children_are_killed():
    marker = f'{1000 + secrets.randbelow(8000)}.{secrets.randbelow(10**6)}'
    prog = (
        "import subprocess, os\n"
        f"subprocess.Popen(['sleep', '{marker}'])\n"
        f"subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"  # escapes the process group
        "assert False"
    )
    r = run_code(prog, timeout=T)
    check_contained(r)
    time.sleep(0.2)
    assert procs_with(f'sleep {marker}') == []
    # also when the program itself exits 0: passing programs are cleaned up too
    r = run_code(f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'], start_new_session=True)", timeout=T)
    assert r.status == 'exited'
    time.sleep(0.2)
    assert procs_with(f'sleep {marker}') == []


def test_fork_limit_bounded_first():
    "Prove RLIMIT_NPROC bites with a bounded loop before any unbounded fork is attempted."
    prog = (
        "import os, time\nn = 0\n"
        "for _ in range(60):\n"
        "    try: pid = os.fork()\n"
        "    except OSError: break\n"
        "    if pid == 0: time.sleep(3); os._exit(0)\n"
        "    n += 1\n"
        "print(n)\nassert n == 60"
    )
    r = run_code(prog, timeout=T, max_procs=8)
    assert 'nproc' in r.sandbox or os.getuid() != 0, r.sandbox
    check_contained(r)
    assert int(r.stdout.strip()) < 8, r.stdout


def test_fork_bomb():
    probe = run_code(
        "import os, time\nn = 0\nfor _ in range(40):\n    try: pid = os.fork()\n    except OSError: break\n"
        "    if pid == 0: time.sleep(2); os._exit(0)\n    n += 1\nprint(n)",
        timeout=T,
        max_procs=8,
    )
    if not (probe.status == 'exited' and int(probe.stdout.strip()) < 8):
        pytest.skip(f'process limit not proven here ({probe.sandbox}); refusing to run an unbounded fork')
    r = run_code("import os\nwhile True:\n    try: os.fork()\n    except OSError: pass", timeout=T, max_procs=16)
    check_contained(r)
    assert r.status == 'timeout'
    assert run_code('x = 1', tests='assert x == 1', timeout=T).passed  # the machine is still usable


SHM = '''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
ids = [libc.shmget(0x5eed0000 + i, 400 << 20, 0o1600) for i in range(3)]  # IPC_CREAT | 0600, 3 x 400 MB
print(ids)
'''


def test_shared_memory_does_not_outlive_the_run():
    def segments():
        return [line.split()[:2] for line in Path('/proc/sysvipc/shm').read_text().splitlines()[1:]]

    before = segments()
    r = run_code(SHM, timeout=T)
    assert 'ipcns' in r.sandbox, (
        r.sandbox,
        r.stdout,
    )
    assert all(int(i) >= 0 for i in r.stdout.strip().strip('[]').split(',')), (
        r.sandbox,
        r.stdout,
    )  # they were made
    assert not [s for s in segments() if s not in before], segments()  # and none is left


CALLER = """
import sys, darts_nb.sandbox as s
m = sys.argv[1]
s.run_code(f"import subprocess, time\\nsubprocess.Popen(['sleep', '{m}'], start_new_session=True)\\n"
           f"subprocess.Popen(['sleep', '{m}'])\\nwhile True: time.sleep(1)", timeout=60)
"""


def wait_until(cond, seconds):
    deadline = time.monotonic() + seconds
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.05)
    return cond()


def test_program_and_its_children_die_with_its_caller():
    """The caller SIGKILLed: nobody is left to clean up, yet the program and the daemons it started end (parent-death
    signal, pid namespace)."""
    marker = f'{1000 + secrets.randbelow(8000)}.{secrets.randbelow(10**6)}'
    caller = subprocess.Popen([sys.executable, '-c', CALLER, marker])
    assert wait_until(lambda: len(procs_with(f'sleep {marker}')) == 2, 15), (
        'the sandboxed program never started its children'
    )
    caller.send_signal(signal.SIGKILL)
    caller.wait()
    assert wait_until(lambda: not procs_with(f'sleep {marker}'), 3), (
        f'still running after the caller was killed: {procs_with(marker)}'
    )


def unix_server(path_or_name):
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path_or_name)
    srv.listen(4)
    srv.settimeout(T + SLACK)
    got = []

    def accept():
        try:
            got.append(srv.accept())
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()
    return srv, got


@pytest.mark.parametrize('kind', ['pathname', 'abstract'])
def test_unix_sockets_of_the_host_are_unreachable(kind, tmp_path):
    if kind == 'pathname':
        d = Path(tempfile.mkdtemp(prefix='darts_sock_'))
        d.chmod(0o755)
        addr = str(d / 's.sock')
    else:
        addr = f'\0darts-test-{TAG}'
    srv, got = unix_server(addr)
    if kind == 'pathname':
        os.chmod(addr, 0o777)  # world-writable: only the sandbox stands in the way
    r = run_code(
        f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.settimeout(1)\ns.connect({addr!r})\ns.sendall(b'hi')",
        timeout=T,
    )
    check_contained(r)
    time.sleep(0.2)
    srv.close()
    if kind == 'pathname':
        shutil.rmtree(d)
    assert got == [], f'the sandboxed program reached a {kind} unix socket of the host'


def readable_secret():
    "A world-readable file in a world-readable folder: file permissions alone would let any uid read it."
    d = Path(tempfile.mkdtemp(prefix='darts_secret_'))
    d.chmod(0o755)
    f = d / 'secret.txt'
    f.write_text(f'secret-{TAG}')
    f.chmod(0o644)
    return d, f


@pytest.mark.parametrize('where', ['world-readable file', 'project tree', 'home'])
def test_reads_are_limited_to_the_interpreter(where):
    d = None
    if where == 'world-readable file':
        d, target = readable_secret()
    elif where == 'project tree':
        target = ROOT / 'pyproject.toml'
    else:
        target = next((p for p in Path.home().iterdir() if p.is_file()), Path.home() / '.profile')
    r = run_code(
        f"import os\nprint(os.path.exists({str(target)!r}))\nprint(open({str(target)!r}).read()[:20])\n"
        f"print(os.listdir({str(target.parent)!r}))",
        timeout=T,
    )
    if d:
        shutil.rmtree(d)
    check_contained(r)
    assert r.stdout.split('\n')[0] == 'False', r  # not even its name is visible
    assert 'secret-' not in r.stdout + r.stderr
    assert '[project]' not in r.stdout + r.stderr


def test_refuses_without_a_required_layer(monkeypatch):
    """A kernel without network namespaces (rehearsed by skipping the layer): refused, unless the caller opts in, and
    then it says what is missing."""
    monkeypatch.setenv('DARTS_SANDBOX_SKIP', 'netns')
    with pytest.raises(SandboxUnavailable, match=r'netns.*allow_unsafe=True.*--allow-unsafe-code'):
        run_code('x = 1', timeout=T)
    from darts_nb.sandbox import check_completion

    prob = dict(prompt='def f():\n    "One."\n', test='def check(c):\n    assert c() == 1\n', entry_point='f')
    with pytest.raises(SandboxUnavailable):
        check_completion(prob, '    return 1\n', timeout=T)
    r = run_code('x = 1', tests='assert x == 1', timeout=T, allow_unsafe=True)
    assert r.passed, r.sandbox
    assert 'netns' not in r.sandbox, r.sandbox
    assert 'mntns' in r.sandbox, r.sandbox
    monkeypatch.setenv('DARTS_ALLOW_UNSAFE_CODE', '1')
    assert check_completion(prob, '    return 1\n', timeout=T).passed


NOBODY = """
import sys, json, os
sys.path.insert(0, sys.argv[1])
from darts_nb.sandbox import run_code
secret, marker = sys.argv[2], sys.argv[3]
out = {}
r = run_code('x = 1', tests='assert x == 1', timeout=5)
out['layers'] = list(r.sandbox)
out['ok'] = r.passed
r = run_code(f"import subprocess\\nsubprocess.Popen(['sleep', '{marker}'], start_new_session=True)", timeout=5)
out['daemon'] = r.status
r = run_code(f"print(open({secret!r}).read())", timeout=5)
out['read'] = (r.status, r.stdout)
r = run_code("import os\\nn = 0\\nfor _ in range(60):\\n    try: pid = os.fork()\\n    except OSError: break\\n"
             "    if pid == 0:\\n        import time; time.sleep(3); os._exit(0)\\n    n += 1\\nprint(n)",
             timeout=5, max_procs=8)
out['forks'] = r.stdout.strip()
print(json.dumps(out))
"""


def test_without_root_user_namespaces_give_the_same_layers(tmp_path):
    "As an ordinary user (uid 65534, a copy of the module): a user namespace of one uid carries every layer root gets."
    if os.geteuid() != 0:
        pytest.skip('switching to another uid for this test needs root')
    import darts_nb.sandbox as sbx
    import darts_nb.containment as cnt
    import darts_nb.core as core
    import fastcore

    lib = Path(tempfile.mkdtemp(prefix='darts_nobody_'))
    pkg = lib / 'darts_nb'
    pkg.mkdir()
    (pkg / '__init__.py').write_text('')
    shutil.copy(sbx.__file__, pkg)
    shutil.copy(cnt.__file__, pkg)
    shutil.copy(core.__file__, pkg)  # the three modules the sandbox imports (stdlib at import)
    for name in ('_boot.py', '_serve.py'):  # the boot program and the call server, read from the package
        shutil.copy(Path(cnt.__file__).with_name(name), pkg)
    # and fastcore, pure Python (`delegates` writes the signatures of run_code and check_completion)
    shutil.copytree(Path(fastcore.__file__).parent, lib / 'fastcore', ignore=shutil.ignore_patterns('__pycache__'))
    for q in (lib, *lib.rglob('*')):
        q.chmod(0o755 if q.is_dir() else 0o644)
    d, secret = readable_secret()
    marker = f'{1000 + secrets.randbelow(8000)}.{secrets.randbelow(10**6)}'
    try:
        p = subprocess.run(
            [sbx.sandbox_python(), '-I', '-c', NOBODY, str(lib), str(secret), marker],
            user=65534,
            group=65534,
            extra_groups=[],
            cwd='/',
            env={'PATH': '/usr/bin:/bin'},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        shutil.rmtree(lib)
        shutil.rmtree(d)
    assert p.returncode == 0, p.stderr
    import json

    out = json.loads(p.stdout)
    assert out['ok'], out
    assert {'userns', 'netns', 'ipcns', 'mntns', 'pidns', 'view', 'scratch', 'nproc'} <= set(out['layers']), out
    assert out['daemon'] == 'exited'
    assert procs_with(f'sleep {marker}') == []
    assert out['read'][0] != 'exited', out['read']
    assert 'secret-' not in out['read'][1], out['read']
    assert int(out['forks']) < 8, out['forks']


# Issue 29: run_code's tests run as __main__, a sys.exit in them is a verdict, every limit is checked.

MAIN_TESTS = 'def test():\n    assert inc(1) == 2\n\n\nif __name__ == "__main__":\n    test()\n'


def test_tests_under_a_main_guard_run():
    "Tests written as a script (`if __name__ == '__main__': test()`) run, as with `python tests.py`."
    assert not run_code(WRONG, tests=MAIN_TESTS, timeout=T).passed
    assert run_code('def inc(x): return x + 1\n', tests=MAIN_TESTS, timeout=T).passed


@pytest.mark.parametrize(
    'main,passed,detail',
    [
        ('    assert inc(1) == 3\n', False, 'AssertionError'),  # its own check fails, as `python program.py` would
        ('    import sys\n    sys.exit(2)\n', False, 'exit status 2'),
        ('    raise SystemExit("usage: program N")\n', False, 'usage: program N'),
        ('    import sys\n    print(inc(1))\n    sys.exit(0)\n', True, ''),  # a success: the tests then judge it
    ],
)
def test_the_programs_main_block_runs_as_with_python_program_py(main, passed, detail):
    r = run_code(
        'def inc(x): return x + 1\n\n\nif __name__ == "__main__":\n' + main, tests='assert inc(1) == 2', timeout=T
    )
    assert r.passed is passed, r
    assert detail in r.detail, r


@pytest.mark.parametrize('code', [0, 1, None])
def test_sys_exit_in_the_tests_is_a_verdict(code):
    "A `sys.exit` in trusted tests is a failed verdict, never a SystemExit in the caller (it would end an eval run)."
    r = run_code('def inc(x): return x + 1\n', tests=f'import sys\nassert inc(1) == 2\nsys.exit({code})', timeout=T)
    assert (r.passed, r.status) == (False, 'failed'), r
    assert 'sys.exit' in r.detail, r


BAD_LIMITS = [
    (dict(memory_mb=-1), 'memory_mb: expected an integer in [16, 1048576], got -1'),  # -1 was RLIM_INFINITY
    (dict(memory_mb=0), 'memory_mb: expected an integer in [16, 1048576], got 0'),
    (dict(memory_mb=True), 'memory_mb: expected an integer in [16, 1048576], got True'),
    (dict(memory_mb=1.5), 'memory_mb: expected an integer in [16, 1048576], got 1.5'),
    (dict(timeout=float('inf')), 'timeout: expected a finite number > 0, got inf'),
    (dict(timeout=float('nan')), 'timeout: expected a finite number > 0, got nan'),
    (dict(timeout=-1), 'timeout: expected a finite number > 0, got -1'),
    (dict(timeout=True), 'timeout: expected a finite number > 0, got True'),
    (dict(timeout=1e12), 'timeout: expected a finite number <= 86400, got 1000000000000.0'),
    (dict(output_kb=-1), 'output_kb: expected an integer in [1, 1048576], got -1'),
    (dict(output_kb=0), 'output_kb: expected an integer in [1, 1048576], got 0'),
    (dict(max_procs=-1), 'max_procs: expected an integer in [1, 65536], got -1'),
    (dict(file_mb=-1), 'file_mb: expected an integer in [1, 1048576], got -1'),
    (dict(scratch_mb=-1), 'scratch_mb: expected an integer in [1, 1048576], got -1'),
    (dict(answer_mb=0), 'answer_mb: expected an integer in [1, 1024], got 0'),
    (dict(allow_unsafe='no'), "allow_unsafe: expected True, False or None, got 'no'"),
]


@pytest.mark.parametrize('kw,msg', BAD_LIMITS, ids=[str(kw) for kw, _ in BAD_LIMITS])
def test_nonsense_limits_are_refused_before_a_run(kw, msg):
    """Each limit is checked, by keyword, in a SandboxLimits and over one, with and without tests and in
    check_completion: a clear error, nothing started."""
    from darts_nb.sandbox import check_completion, SandboxLimits

    prob = dict(prompt='def f():\n    "One."\n', test='def check(c):\n    assert c() == 1\n', entry_point='f')
    with pytest.raises(ValueError) as e:
        check_completion(prob, '    return 1\n', **kw)
    assert str(e.value) == msg
    for tests in (None, 'assert x == 1'):
        with pytest.raises(ValueError) as e:
            run_code('x = 1', tests=tests, **kw)
        assert str(e.value) == msg
        with pytest.raises(ValueError) as e:
            run_code('x = 1', tests=tests, limits=SandboxLimits(timeout=T), **kw)
        assert str(e.value) == msg
    with pytest.raises(ValueError) as e:
        SandboxLimits(**kw)
    assert str(e.value) == msg


def test_limits_travel_as_one_object_or_by_keyword():
    "`limits=SandboxLimits(...)` and the same limits by keyword run alike; a keyword overrides the object's field."
    from darts_nb.sandbox import check_completion, SandboxLimits

    prog = 'import resource\nprint(resource.getrlimit(resource.RLIMIT_AS)[0] >> 20)'
    by_keyword = run_code(prog, timeout=T, memory_mb=256)
    by_object = run_code(prog, limits=SandboxLimits(timeout=T, memory_mb=256))
    overridden = run_code(prog, limits=SandboxLimits(timeout=T, memory_mb=512), memory_mb=256)
    assert by_keyword.stdout == by_object.stdout == overridden.stdout == '256\n', (by_keyword, by_object, overridden)
    prob = dict(prompt='def f():\n    "One."\n', test='def check(c):\n    assert c() == 1\n', entry_point='f')
    assert check_completion(prob, '    return 1\n', limits=SandboxLimits(timeout=T)).passed
    for call in (lambda: run_code('x = 1', timout=T), lambda: check_completion(prob, '    return 1\n', memory=64)):
        with pytest.raises(TypeError, match='is not a sandbox limit'):
            call()
    with pytest.raises(TypeError, match='limits: expected a SandboxLimits or None, got dict'):
        run_code('x = 1', limits=dict(timeout=T))
