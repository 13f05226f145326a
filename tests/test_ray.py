"""The programme on a local Ray instance: loopback only, the same tables as the local executor, a job whose worker
is killed retried."""

import os
import signal
import subprocess
import sys
import threading
import time
import psutil
import pytest
import ray
from darts_nb.executors import RayExecutor, Job, execute, non_loopback_sockets
from darts_nb.experiments import run_all
from darts_nb.runs import experts_table, sweep_table
from darts_nb.paper import main_table

PLAIN = (
    "import ray; from darts_nb.executors import non_loopback_sockets; ray.init(num_cpus=2, include_dashboard=False); "
    "print(len(non_loopback_sockets())); ray.shutdown()"
)
ONLY, LIMIT = ['experts', 'sweep', 'main'], 4  # the quick programme's tables, on 4 eval items per domain


def _other_addresses() -> bool:
    "Whether this machine has an IPv4 address other than loopback (where a plain Ray start would use it)."
    return any(
        a.family.name == 'AF_INET' and not a.address.startswith('127.')
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
    )


def _pid(run, x):
    return os.getpid()


class _Plain:
    "A stand-in for a run: what an executor asks of one."

    class options:  # the run's options: its models run on the CPU
        device = 'cpu'

    def spec(self):
        return {}

    @classmethod
    def from_spec(cls, spec):
        return cls()


# workers cannot import this test file: send its functions by value
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope='module')
def local_ray():
    "One local Ray instance for this file (`ray.init(num_cpus=2)` on loopback); the programme's executor joins it."
    ex = RayExecutor(num_cpus=2)
    ex.start()
    yield ex
    ex.close()


def test_local_ray_stays_on_loopback(local_ray):
    # workers up and talking
    pids = execute(local_ray, _Plain(), [Job(_pid, (i,), f'pid {i}') for i in range(4)], desc='pids')
    ours = {p.pid for p in psutil.Process().children(recursive=True)}
    assert set(pids) <= ours, (pids, ours)
    assert len(ours) >= 3, (pids, ours)  # GCS, raylet and workers are processes we can inspect
    assert non_loopback_sockets() == []
    # the check can fail: a plain start (a fresh process, without our settings) uses the host's own address
    if _other_addresses():
        env = {k: v for k, v in os.environ.items() if k != 'RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER'} | {
            'RAY_USAGE_STATS_ENABLED': '0'
        }
        out = subprocess.run([sys.executable, '-c', PLAIN], env=env, capture_output=True, text=True, timeout=300)
        assert int(out.stdout.split()[-1]) > 0, out


def _kill_first_arm(seen: list, stop: threading.Event):
    "SIGKILL the first Ray worker found computing an arm (mid-way: Ray titles a worker by the task it runs)."
    while not stop.is_set():
        for p in psutil.Process().children(recursive=True):
            try:
                title = ' '.join(p.cmdline())
            except psutil.Error:
                continue
            if title.startswith('ray::arm '):
                seen.append(title)
                os.kill(p.pid, signal.SIGKILL)
                return
        time.sleep(0.2)


def test_quick_programme_on_ray_equals_local(local_ray):
    local = run_all('ci', 'test-ray-local', quick=True, only=ONLY, eval_limit=LIMIT, report=False, workers=2)
    killed, stop = [], threading.Event()
    killer = threading.Thread(target=_kill_first_arm, args=(killed, stop), daemon=True)
    killer.start()
    try:
        on_ray = run_all(
            'ci', 'test-ray', quick=True, only=ONLY, eval_limit=LIMIT, report=False, executor='ray', workers=2
        )
    finally:
        stop.set()
        killer.join()
    assert killed, 'no arm was running on a Ray worker'
    # the run joined the instance, which stayed on loopback
    assert ray.is_initialized()
    assert non_loopback_sockets() == []
    assert not (on_ray.dir / 'failed_jobs.json').exists()  # the killed job was retried, not recorded as failed
    for table in (experts_table, sweep_table, main_table):
        a, b = table(local), table(on_ray)
        assert len(a), (table.__name__, a, b)
        assert a.equals(b), (table.__name__, a, b)
