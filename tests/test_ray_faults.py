"""Faults of the scale-out path: a node of a loopback Ray cluster lost while a stage runs, and the driver killed mid-run
and started again (local executor and Ray). Each run ends with the local executor's tables and no duplicated rows,
and leaves nothing half-written."""

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
import psutil
import pytest
from darts_nb.executors import non_loopback_sockets
from darts_nb.experiments import run_all
from darts_nb.runs import experts_table, sweep_table, open_run, run_dir
from darts_nb.store import KEY_COLUMNS, load_results

ray = pytest.importorskip('ray')
from ray.cluster_utils import Cluster  # noqa: E402

# the fewest records with stages of several jobs: 4 scoring jobs, then 4 merges (each a job) and their scoring
ONLY, LIMIT = ['experts', 'sweep'], 4
TABLES = (experts_table, sweep_table)
NODE = dict(node_ip_address='127.0.0.1', object_store_memory=80 * 2**20)  # every node on loopback, a small store
# set by a local Ray start in this process (tests/test_ray.py): it would keep any driver on loopback by itself
CLUSTER_CHECK = 'RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER'
RUN_S = 600  # a driver that runs longer hangs: it fails the test instead of blocking it


@pytest.fixture(scope='module')
def reference(tmp_path_factory):
    "The tables of an uninterrupted local run (2 worker processes), its merges in a folder of its own."
    shared = tmp_path_factory.mktemp('reference')
    _fresh('faults-reference')
    run = run_all(
        'ci', 'faults-reference', quick=True, only=ONLY, eval_limit=LIMIT, report=False, workers=2, shared_dir=shared
    )
    run = open_run(run.name)  # read back as the fault runs are (`open_run` orders the experts as run.json holds them)
    return {t.__name__: t(run) for t in TABLES}, len(load_results(run.dir))


@pytest.fixture(scope='module')
def cluster():
    "A Ray cluster on 127.0.0.1: a head without CPUs (the drivers' node) and one worker node of 1 CPU."
    # started as `ray start --node-ip-address 127.0.0.1` would start them (Ray's own choice of address not overridden)
    os.environ.pop(CLUSTER_CHECK, None)
    os.environ['RAY_USAGE_STATS_ENABLED'] = '0'
    c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=0, include_dashboard=False, **NODE))
    try:
        c.add_node(num_cpus=1, **NODE)
        c.wait_for_nodes()
        yield c
    finally:
        c.shutdown()


def _fresh(name: str) -> None:
    "Remove what an earlier session left of run `name` (a test run starts from nothing)."
    shutil.rmtree(run_dir(name), ignore_errors=True)


def _driver(name: str, shared: Path, log: Path, *flags: str) -> subprocess.Popen:
    "`darts run` of the fault runs in a new process (its own session), its output in `log`."
    cmd = [sys.executable, '-m', 'darts_nb.cli', 'run', '--profile', 'ci', '--name', name, '--quick']
    cmd += ['--eval-limit', str(LIMIT), '--only', *ONLY, '--shared-dir', str(shared), *flags]
    shared.mkdir(exist_ok=True)  # a shared folder is made by its owner, never by darts (it is checked to exist)
    env = {k: v for k, v in os.environ.items() if k != CLUSTER_CHECK}  # a user's shell, not this test's settings
    with open(log, 'ab') as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)


def _finish(p: subprocess.Popen, log: Path) -> None:
    "Wait for a driver to end well (a hang or a failure fails the test, with the driver's output)."
    try:
        rc = p.wait(timeout=RUN_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        pytest.fail(f'the driver ran over {RUN_S} s:\n{log.read_text()[-6000:]}')
    assert rc == 0, log.read_text()[-6000:]


def _rows(store: Path) -> int:
    "Result rows in a store being written (0 while it does not exist)."
    if not store.exists():
        return 0
    con = sqlite3.connect(f'file:{store}?mode=ro', uri=True, timeout=30)
    try:
        return con.execute('SELECT COUNT(*) FROM results').fetchone()[0]
    except sqlite3.OperationalError:
        return 0  # being created
    finally:
        con.close()


def _duplicates(store: Path) -> list:
    "Keys held by more than one row, in the results and the items."
    keys = ', '.join(KEY_COLUMNS)
    con = sqlite3.connect(f'file:{store}?mode=ro', uri=True)
    try:
        res = con.execute(f'SELECT {keys}, COUNT(*) FROM results GROUP BY {keys} HAVING COUNT(*) > 1').fetchall()
        its = con.execute(f'SELECT {keys}, item, COUNT(*) FROM items GROUP BY {keys}, item HAVING COUNT(*) > 1')
        return res + its.fetchall()
    finally:
        con.close()


def _leftovers(*folders: Path) -> list[str]:
    "Temporaries and leases under the folders (a finished run leaves none)."
    return sorted(str(p) for f in folders for p in f.rglob('*') if '.tmp-' in p.name or p.name.endswith('.lease'))


def _check_same(name: str, shared: Path, reference) -> None:
    "The run ended with the reference's tables, no key twice in its store, no temporary or lease left."
    tables, n = reference
    run = open_run(name)
    for t in TABLES:
        a, b = tables[t.__name__], t(run)
        assert len(a), (t.__name__, a, b)
        assert a.equals(b), (t.__name__, a, b)
    assert len(load_results(run.dir)) == n
    assert _duplicates(run.dir / 'results.sqlite') == []
    assert not (run.dir / 'failed_jobs.json').exists()  # no job failed for good
    assert _leftovers(run.dir, shared) == []


def _merge_in_flight(shared: Path) -> bool:
    "Whether a merge is being written: its temporary folder exists in the shared merges folder."
    return any(shared.glob('merges/*/.*.tmp-*'))


def _kill_mid_run(p: subprocess.Popen, store: Path, shared: Path, log: Path) -> list[int]:
    "SIGKILL the driver once it has recorded rows and a merge is in flight; returns the pids of its descendants."
    t0 = time.time()
    while not (_rows(store) and _merge_in_flight(shared)):
        assert p.poll() is None, f'the driver ended before the kill:\n{log.read_text()[-6000:]}'
        assert time.time() - t0 < RUN_S, 'no merge was seen in flight'
        time.sleep(0.05)
    kids = [c.pid for c in psutil.Process(p.pid).children(recursive=True)]
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    return kids


def _gone(pids: list[int], within: float = 60) -> list[int]:
    "Those of `pids` still alive after `within` seconds (zombies count as gone)."
    end = time.time() + within
    while True:
        alive = [q for q in pids if psutil.pid_exists(q) and psutil.Process(q).status() != psutil.STATUS_ZOMBIE]
        if not alive or time.time() > end:
            return alive
        time.sleep(0.5)


@pytest.mark.parametrize('executor', ['local', 'ray'])
def test_driver_killed_and_restarted(executor, reference, request, tmp_path):
    "The driver SIGKILLed mid-sweep, then started again with the same name: the same tables, no row twice."
    name, shared, log = f'faults-driver-{executor}', tmp_path / 'shared', tmp_path / 'driver.log'
    _fresh(name)
    flags = ['--workers', '2']
    if executor == 'ray':
        flags = ['--executor', 'ray', '--address', request.getfixturevalue('cluster').address]
    store = run_dir(name) / 'results.sqlite'
    kids = _kill_mid_run(_driver(name, shared, log, *flags), store, shared, log)
    n = _rows(store)
    assert 0 < n < reference[1], n  # some rows, not all
    if executor == 'local':
        # the killed driver's worker processes end with it (they would compute and hold memory for nothing)
        assert kids, kids
        assert _gone(kids) == [], kids
    _finish(_driver(name, shared, log, *flags), log)
    _check_same(name, shared, reference)


def _raylet(node) -> psutil.Process:
    return psutil.Process(node.all_processes['raylet'][0].process.pid)


def _job_on(node, seen: list, stop: threading.Event) -> None:
    "Wait until a worker of `node` runs a job (Ray titles a worker by its task), note its title."
    while not stop.is_set():
        try:
            for w in _raylet(node).children(recursive=True):
                title = ' '.join(w.cmdline())
                if title.startswith(('ray::score ', 'ray::merge ')):
                    seen.append(title)
                    return
        except psutil.Error:
            pass  # a worker exited meanwhile
        time.sleep(0.05)


def test_node_lost_mid_stage(cluster, reference, tmp_path):
    "A second worker node joins, then is removed while it runs a job: the run ends with the local tables."
    name, shared, log = 'faults-node', tmp_path / 'shared', tmp_path / 'driver.log'
    _fresh(name)
    node = cluster.add_node(num_cpus=1, **NODE)
    seen, stop = [], threading.Event()
    p = _driver(name, shared, log, '--executor', 'ray', '--address', cluster.address)
    try:
        watch = threading.Thread(target=_job_on, args=(node, seen, stop), daemon=True)
        watch.start()
        t0 = time.time()
        while watch.is_alive() and p.poll() is None and time.time() - t0 < RUN_S:
            watch.join(0.5)
        assert seen, f'no job ran on the second node:\n{log.read_text()[-6000:]}'
        cluster.remove_node(node)  # its raylet and workers killed: the job in flight is lost with them
        # everything (nodes, workers, the driver) talked on loopback alone
        assert non_loopback_sockets() == []
        _finish(p, log)
    finally:
        stop.set()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        if node in cluster.worker_nodes:
            cluster.remove_node(node)
    _check_same(name, shared, reference)


LOCAL_START = (
    "import ray; from darts_nb.executors import start_local_ray; start_local_ray(1); "
    "print('nodes', len(ray.nodes())); ray.shutdown()"
)


def test_local_ray_beside_a_cluster(cluster):
    "A local Ray instance started while another cluster runs on this machine is a new one, not that cluster."
    env = {k: v for k, v in os.environ.items() if k != CLUSTER_CHECK}
    out = subprocess.run([sys.executable, '-c', LOCAL_START], env=env, capture_output=True, text=True, timeout=RUN_S)
    assert out.returncode == 0, out.stderr[-3000:]
    assert 'nodes 1' in out.stdout, out.stderr[-3000:]
