"Hostile programs must score as failures, within the time limit, leaving no process and no file behind."
import os, socket, time, threading, secrets
from pathlib import Path
import pytest
from darts_nb.sandbox import run_code, CodeResult

T = 2.0          # the per-program timeout used here
SLACK = 2.5      # harness start-up + cleanup allowance on a loaded 2-core machine
TAG = secrets.token_hex(4)

def procs_of(uid):
    "pids of live (not zombie) processes whose real uid is `uid`."
    out = []
    for d in Path('/proc').iterdir():
        if not d.name.isdigit(): continue
        try: st = (d/'status').read_text()
        except OSError: continue
        f = dict(l.split(':', 1) for l in st.splitlines() if ':' in l)
        if int(f['Uid'].split()[0]) == uid and f['State'].split()[0] not in ('Z', 'X'): out.append(int(d.name))
    return out

def procs_with(marker):
    "pids whose command line contains `marker`."
    out = []
    for d in Path('/proc').iterdir():
        if not d.name.isdigit(): continue
        try: cmd = (d/'cmdline').read_bytes().replace(b'\0', b' ').decode()
        except OSError: continue
        if marker in cmd and 'pytest' not in cmd: out.append(int(d.name))
    return out

def check_contained(r: CodeResult, timeout=T):
    assert not r.passed, r
    assert r.status in ('failed', 'timeout', 'error'), r.status
    assert r.seconds < timeout + SLACK, r.seconds
    if r.uid is not None and r.uid != os.getuid(): assert procs_of(r.uid) == [], f'left running as uid {r.uid}'

def test_correct_program_passes():
    r = run_code('def inc(x): return x + 1\nassert inc(1) == 2\nprint("done")', timeout=T)
    assert (r.passed, r.status, r.returncode) == (True, 'passed', 0), r
    assert r.stdout.strip() == 'done' and '__DARTS_PASS_' not in r.stdout

def test_bad_input():
    with pytest.raises(TypeError, match='program'): run_code(b'assert True')
    with pytest.raises(ValueError, match='timeout'): run_code('assert True', timeout=0)

HOSTILE = {
    'infinite_loop': 'while True: pass',
    'sleep': 'import time; time.sleep(100)',
    'alloc_10gb': 'x = bytearray(10 * 2**30)\nassert len(x) > 0',
    'alloc_creeping': 'l = []\nwhile True: l.append(bytearray(2**24))',
    'syntax_error': 'def f(:\n    return 1\nassert f() == 1',
    'sys_exit_before_asserts': 'import sys\nsys.exit(0)\nassert 1 == 2',
    'os_exit_before_asserts': 'import os\nos._exit(0)\nassert 1 == 2',
    'raise_systemexit_in_finally': 'try:\n    assert 1 == 2\nfinally:\n    raise SystemExit(0)',
    'forged_sentinel': "print('__DARTS_PASS_' + '0' * 32 + '__')\nimport sys; sys.exit(0)\nassert False",
    'os_system_write': f"import os\nassert os.system('touch /work/main/darts_pwned_{TAG}') == 0",
    'wrong_answer': 'assert sum([1, 2]) == 4',
    'print_flood': 'while True: print("x" * 10000)',
}

@pytest.mark.parametrize('name', list(HOSTILE))
def test_hostile(name):
    r = run_code(HOSTILE[name], timeout=T)
    check_contained(r)
    assert len(r.stdout) < 20_000 and len(r.stderr) < 20_000
    assert not Path(f'/work/main/darts_pwned_{TAG}').exists()

def test_timeout_status():
    r = run_code('while True: pass', timeout=1)
    assert r.status == 'timeout' and r.returncode is None and 1 <= r.seconds < 1 + SLACK

def layers():
    return run_code('assert True', timeout=T).sandbox

def test_layers_reported():
    ls = layers()
    assert 'rlimits' in ls
    if os.geteuid() == 0: assert {'uid', 'nproc'} <= set(ls), ls    # root always drops to a fresh uid

@pytest.mark.parametrize('where', ['/work/main', '/root', '/tmp', '/var/tmp', '/dev/shm', str(Path.home())])
def test_no_write_outside_workdir(where):
    if where in ('/tmp', '/var/tmp', '/dev/shm') and 'landlock-fs' not in layers():
        pytest.skip(f'{where} is world-writable and this kernel has no Landlock: writes there are not blocked')
    target = Path(where)/f'darts_sbx_escape_{TAG}'
    # the program swallows the error and exits 0: the file must still not exist
    r = run_code(f"try: open({str(target)!r}, 'w').write('x')\nexcept Exception as e: print(type(e).__name__)", timeout=T)
    assert not target.exists(), f'{target} was written'
    assert r.passed and r.stdout.strip() in ('PermissionError', 'FileNotFoundError', 'OSError'), r
    r = run_code(f"open({str(target)!r}, 'w').write('x')", timeout=T)
    check_contained(r); assert not target.exists()

def test_workdir_is_writable_and_removed():
    r = run_code("import os\nopen('f.txt', 'w').write('x')\nassert open('f.txt').read() == 'x'\nprint(os.getcwd())", timeout=T)
    assert r.passed, r
    assert not Path(r.stdout.strip()).exists()

def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv('DARTS_JUDGE_API_KEY', 'sk-fake-secret-123')
    r = run_code("import os\nassert 'sk-fake-secret-123' in repr(dict(os.environ))", timeout=T)
    check_contained(r)
    # nor through the parent's /proc entry
    r = run_code(f"assert b'sk-fake' in open('/proc/{os.getpid()}/environ', 'rb').read()", timeout=T)
    check_contained(r)
    assert 'sk-fake' not in r.stdout + r.stderr

def test_network_is_blocked():
    if not {'netns', 'landlock-net'} & set(layers()): pytest.skip('no network namespace and no Landlock TCP rules here')
    srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(4); port = srv.getsockname()[1]
    srv.settimeout(T + SLACK); got = []
    def accept():
        try: got.append(srv.accept())
        except OSError: pass
    th = threading.Thread(target=accept, daemon=True); th.start()
    r = run_code(f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\ns.sendall(b'hi')", timeout=T)
    check_contained(r)
    th.join(0.5); srv.close()
    assert got == [], 'the sandboxed program reached a socket on the host'

def test_background_children_are_killed():
    marker = f'{1000 + secrets.randbelow(8000)}.{secrets.randbelow(10**6)}'
    prog = ("import subprocess, os\n"
            f"subprocess.Popen(['sleep', '{marker}'])\n"
            f"subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"   # escapes the process group
            "assert False")
    r = run_code(prog, timeout=T)
    check_contained(r)
    time.sleep(0.2)
    assert procs_with(f'sleep {marker}') == []
    # also when the program itself exits 0: passing programs are cleaned up too
    r = run_code(f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'], start_new_session=True)", timeout=T)
    assert r.passed; time.sleep(0.2)
    assert procs_with(f'sleep {marker}') == []

def test_fork_limit_bounded_first():
    "Prove RLIMIT_NPROC bites with a bounded loop before any unbounded fork is attempted."
    prog = ("import os, time\nn = 0\n"
            "for _ in range(60):\n"
            "    try: pid = os.fork()\n"
            "    except OSError: break\n"
            "    if pid == 0: time.sleep(3); os._exit(0)\n"
            "    n += 1\n"
            "print(n)\nassert n == 60")
    r = run_code(prog, timeout=T, max_procs=8)
    assert 'nproc' in r.sandbox or os.getuid() != 0, r.sandbox
    check_contained(r)
    assert int(r.stdout.strip()) < 8, r.stdout

def test_fork_bomb():
    probe = run_code("import os, time\nn = 0\nfor _ in range(40):\n    try: pid = os.fork()\n    except OSError: break\n"
                     "    if pid == 0: time.sleep(2); os._exit(0)\n    n += 1\nprint(n)", timeout=T, max_procs=8)
    if not (probe.passed and int(probe.stdout.strip()) < 8):
        pytest.skip(f'process limit not proven here ({probe.sandbox}); refusing to run an unbounded fork')
    r = run_code("import os\nwhile True:\n    try: os.fork()\n    except OSError: pass", timeout=T, max_procs=16)
    check_contained(r)
    assert r.status == 'timeout'
    assert run_code('assert True', timeout=T).passed     # the machine is still usable

SHM = '''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
ids = [libc.shmget(0x5eed0000 + i, 400 << 20, 0o1600) for i in range(3)]  # IPC_CREAT | 0600, 3 x 400 MB
print(ids)
'''

def test_shared_memory_does_not_outlive_the_run():
    def segments(): return [l.split()[:2] for l in Path('/proc/sysvipc/shm').read_text().splitlines()[1:]]
    before = segments()
    r = run_code(SHM, timeout=T)
    if os.geteuid() != 0: pytest.skip('an IPC namespace needs root here')
    assert 'ipcns' in r.sandbox and all(int(i) >= 0 for i in r.stdout.strip().strip('[]').split(',')), (r.sandbox, r.stdout)  # they were made
    assert not [s for s in segments() if s not in before], segments()  # and none is left

CALLER = '''
import darts_nb.sandbox as s
u = s._sandbox_uid(); s._sandbox_uid = lambda: u
print(u, flush=True)
s.run_code("import time\\nwhile True: time.sleep(1)", timeout=60)
'''

def test_program_dies_with_its_caller():
    import subprocess, sys, signal
    if os.geteuid() != 0: pytest.skip('a uid of its own needs root here')
    caller = subprocess.Popen([sys.executable, '-c', CALLER], stdout=subprocess.PIPE, text=True)
    uid = int(caller.stdout.readline())
    deadline = time.monotonic() + 10
    while not procs_of(uid) and time.monotonic() < deadline: time.sleep(0.05)
    assert procs_of(uid), 'the sandboxed program never started'
    caller.send_signal(signal.SIGKILL); caller.wait()
    deadline = time.monotonic() + 3
    while procs_of(uid) and time.monotonic() < deadline: time.sleep(0.05)
    assert not procs_of(uid), f'still running after its caller was killed: {procs_of(uid)}'
