"""Faults of the store, the run folder, leases and options at the command line (issue 29): one line each.

Every case runs `darts_nb.cli.main` in-process on a real run of the ci zoo and asserts: the exit status (2 for a
bad argument or input, 1 for a fault of the environment), one line on stderr saying what it must, no traceback,
and nothing made that should not be. Read-only files and folders are made so for real: as root (who ignores
permission bits) with the immutable attribute (`chattr +i`), otherwise with chmod."""

import json
import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
import pytest
from darts_nb.core import darts_home
from darts_nb.lease import host_id
from darts_nb.options import MAX_NAME
from darts_nb.runs import make_run, merges_dir, run_dir
from darts_nb.store import record, results_path
from darts_nb.zoo import build_zoo
from test_bad_inputs_cli import run_main

ZOO = Path(build_zoo('ci')['base']).parent  # the ci zoo of the session's DARTS_HOME, built once
NAME = 'faults'
HOLD = (
    "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1]); c.execute('BEGIN EXCLUSIVE'); "
    "print('held', flush=True); time.sleep(60)"
)


def read_only(path: Path, stack: ExitStack) -> Path:
    "Make `path` read-only for real until the test ends."
    if os.geteuid() == 0:
        r = subprocess.run(['chattr', '+i', str(path)], capture_output=True, text=True)
        if r.returncode:
            pytest.skip(f'root cannot make {path} read-only here (chattr: {r.stderr.strip()})')
        stack.callback(subprocess.run, ['chattr', '-i', str(path)], check=True)
    else:
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        stack.callback(path.chmod, mode)
    return path


def a_run(home: Path):
    "A quick ci run with one row recorded."
    run = make_run('ci', NAME, quick=True, eval_limit=3)
    record(run.dir, dict(metric='exact_match', value=50.0, n=3), role='base', merge_config='base', domain='math')
    return run


def store_read_only(home, stack, mp):
    read_only(results_path(a_run(home).dir), stack)


def folder_read_only(home, stack, mp):
    read_only(a_run(home).dir, stack)


def figures_read_only(home, stack, mp):
    d = a_run(home).dir / 'figures'
    d.mkdir()
    read_only(d, stack)


def store_busy(home, stack, mp):
    store = results_path(a_run(home).dir)
    holder = subprocess.Popen([sys.executable, '-c', HOLD, str(store)], stdout=subprocess.PIPE, text=True)
    stack.callback(holder.stdout.close)
    stack.callback(holder.wait)
    stack.callback(holder.kill)
    assert holder.stdout.readline().strip() == 'held'
    mp.setenv('DARTS_STORE_TIMEOUT', '0.5')
    return f'pid {holder.pid}' if Path('/proc/locks').exists() else 'is busy'


def a_file(home, stack, mp):
    (home / 'a-file').write_text('not a folder')


def null_pid_lease(home, stack, mp):
    d = merges_dir(a_run(home))
    d.mkdir(parents=True)
    (d / '.ta-0.5.tmp-1-ab.lease').write_text(json.dumps(dict(host=host_id(), pid=None, started=0, heartbeat=0)))


def edit_run_json(**fields):
    def setup(home, stack, mp):
        meta = a_run(home).dir / 'run.json'
        meta.write_text(json.dumps({**json.loads(meta.read_text()), **fields}))

    return setup


def dangling_store(home, stack, mp):
    store = results_path(a_run(home).dir)
    store.rename(home / 'moved.sqlite')
    store.symlink_to(home / 'elsewhere.sqlite')


def nothing(home, stack, mp):
    pass


STORE = f'runs/{NAME}/results.sqlite'
RUN = ['run', '--profile', 'ci', '--name', NAME, '--quick', '--eval-limit', '3', '--only', 'experts']
SURGERY = ['surgery', '--profile', 'ci', '--name', NAME, '--eval-limit', '3', '--iters', '2']
REPORT = ['report', NAME]
CPUS = os.cpu_count()
BAD = {  # case -> (argv, setup, exit status, what stderr must say; a setup may return more it must say)
    'read-only store: run': (RUN, store_read_only, 1, f'{STORE} is read-only'),
    'read-only store: surgery': (SURGERY, store_read_only, 1, f'{STORE} is read-only'),
    'read-only run folder: run': (RUN, folder_read_only, 1, f'runs/{NAME} is read-only'),
    'read-only run folder: surgery': (SURGERY, folder_read_only, 1, f'runs/{NAME} is read-only'),
    'read-only run folder: report': (REPORT, folder_read_only, 1, f'runs/{NAME} is read-only'),
    'read-only figures folder: report': (REPORT, figures_read_only, 1, f'runs/{NAME}/figures is read-only'),
    'busy store: run': (RUN, store_busy, 1, f'{STORE} is busy: another writer'),
    'busy store: surgery': (SURGERY, store_busy, 1, f'{STORE} is busy: another writer'),
    'shared dir is a file': (
        RUN + ['--shared-dir', 'HOME/a-file'],
        a_file,
        2,
        "shared_dir: expected an existing folder, got 'HOME/a-file', a file",
    ),
    'shared dir does not exist': (
        RUN + ['--shared-dir', 'HOME/no-such-dir'],
        nothing,
        2,
        "got 'HOME/no-such-dir', something that does not exist (it is not made",
    ),
    'name of 300 characters': (
        ['run', '--profile', 'ci', '--name', 'x' * 300, '--quick'],
        nothing,
        2,
        f'name: expected a directory name of at most {MAX_NAME} bytes',
    ),
    'too many workers': (
        ['run', '--profile', 'ci', '--name', NAME, '--workers', str(CPUS + 1)],
        nothing,
        2,
        f"workers: expected at most {CPUS} (this machine's CPUs (os.cpu_count())), got {CPUS + 1}",
    ),
    'lease with a null pid': (
        ['merge', '--profile', 'ci', '--only', 'ta-0.5'],
        null_pid_lease,
        2,
        '.ta-0.5.tmp-1-ab.lease: pid: expected an integer > 0, got None',
    ),
    'run.json eval_limit a string': (
        REPORT,
        edit_run_json(eval_limit='3'),
        2,
        "run.json: eval_limit: expected an integer >= 1 or null, got '3'",
    ),
    'run.json models_key a number': (REPORT, edit_run_json(models_key=5), 2, 'models_key: expected a string, got 5'),
    'run.json inputs a list': (REPORT, edit_run_json(inputs=[]), 2, 'inputs: expected an object, got []'),
    'run.json eval_limit edited': (
        REPORT,
        edit_run_json(eval_limit=60),
        2,
        'no longer matches itself (eval_limit is 60, its inputs say 3)',
    ),
    'run.json quick edited': (REPORT, edit_run_json(quick=False), 2, 'its record_key no longer matches'),
    'dangling store link': (REPORT, dangling_store, 2, 'elsewhere.sqlite, which does not exist'),
}


@pytest.fixture
def home(home):
    "conftest's home, with the session's ci zoo linked in."
    (home / 'zoo-ci').symlink_to(ZOO)
    return home


def made(home: Path) -> set:
    "What is under `home` (but the zoo's link)."
    return {str(p.relative_to(home)) for p in home.rglob('*') if p.name != 'zoo-ci'}


@pytest.mark.parametrize('case', list(BAD))
def test_a_fault_is_one_line(case, home, monkeypatch):
    argv, setup, status, says = BAD[case]
    argv = [a.replace('HOME', str(home)) for a in argv]
    with ExitStack() as stack:
        also = setup(home, stack, monkeypatch)
        before = made(home)
        code, out, err = run_main(argv)
    lines = [x for x in err.splitlines() if 'error' in x.lower()]  # progress bars aside
    assert code == status, (code, err[-2000:])
    assert 'Traceback' not in err, err[-2000:]
    assert len(lines) == 1, err[-2000:]
    assert lines[0].startswith(f'darts {argv[0]}: error: '), lines
    assert says.replace('HOME', str(home)) in lines[0], lines
    assert also is None or also in lines[0], lines
    new = made(home) - before
    assert not {p for p in new if not p.startswith('runs/')}, new
    assert not any('report' in p for p in new), new
    if case.startswith(('shared', 'name', 'too many')):
        assert not (home / 'runs').exists()
        assert not (home / 'no-such-dir').exists()  # refused before anything


def test_a_read_only_store_still_reports(home):
    "Reading needs no write: a read-only store (its folder writable) gives its report."
    with ExitStack() as stack:
        store_read_only(home, stack, None)
        code, out, err = run_main(REPORT)
    assert code == 0, err[-2000:]
    assert (run_dir(NAME) / 'report.md').exists(), err[-2000:]


def test_a_missing_figure_is_not_linked(home):
    "A section whose figure file is missing is written without the link, with a note how to make it."
    from darts_nb.experiments import EXPERIMENTS
    from darts_nb.report import write_report
    from darts_nb.runs import open_run

    run = a_run(home)
    # the bias record ran, its figures are gone
    (run.dir / 'bias_trend.csv').write_text('domain,spearman_rho,p,late_early_ratio\nmath,0.5,0.01,2.0\n')
    text = write_report(open_run(NAME), {'bias': EXPERIMENTS['bias']}).read_text()
    assert 'figures/figure1.png' in text
    assert '](figures/figure1.png)' not in text
    assert 'is missing' in text
    assert all((run.dir / link.split(')')[0]).exists() for link in text.split('](')[1:])


def test_the_default_store_wait_is_a_minute(monkeypatch):
    from darts_nb.store import store_timeout

    monkeypatch.delenv('DARTS_STORE_TIMEOUT', raising=False)
    assert store_timeout() == 60.0
    assert darts_home()  # the session's home, untouched by these tests
