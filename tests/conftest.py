"""Fixtures and helpers that several test files share (pytest finds this file itself; the helpers are imported as
`from conftest import half_written`)."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest


def _own_temporary_folder() -> None:
    "Under pytest-xdist (make test runs files in parallel), this worker's temporary files go to a folder of its own."
    # A test that checks what is left in the temporary folder (test_sandbox: no darts_sbx_* left behind) must see its
    # own process's leftovers only, not those of a test running beside it. Subprocesses inherit TMPDIR. The prefix is
    # short: Ray and vLLM put Unix sockets under it, whose paths may not exceed 107 bytes.
    worker = os.environ.get('PYTEST_XDIST_WORKER')
    if not worker:
        return
    folder = tempfile.mkdtemp(prefix=f'{worker}-')
    os.chmod(folder, 0o1777)  # as /tmp: the sandbox's tests run a process as nobody on files they put there
    os.environ['TMPDIR'] = folder
    tempfile.tempdir = folder
    atexit.register(shutil.rmtree, folder, ignore_errors=True)


_own_temporary_folder()


@pytest.fixture
def home(tmp_path, monkeypatch):
    "A DARTS_HOME of the test's own (an empty temporary folder): nothing it writes reaches the session's home."
    monkeypatch.setenv('DARTS_HOME', str(tmp_path))
    return tmp_path


@pytest.fixture(scope='module')
def zoo():
    "The ci zoo's folder (built once per session by `make zoo-ci`, in the session's DARTS_HOME)."
    from darts_nb.core import darts_home

    z = darts_home() / 'zoo-ci'
    assert (z / 'math' / 'model.safetensors').exists(), f'the ci zoo is built by `make zoo-ci` ({z})'
    return z


@pytest.fixture(scope='module')
def code_model():
    "The ci zoo's code expert and its tokenizer (the zoo is built once in the session's DARTS_HOME)."
    from darts_nb.checkpoints import load_model
    from darts_nb.zoo import build_zoo

    return load_model(build_zoo('ci')['code'])


def temporaries(parent) -> list[str]:
    "The names of the temporary siblings (`.NAME.tmp-...`) directly in `parent`: what a dying atomic write leaves."
    return sorted(p.name for p in Path(parent).iterdir() if '.tmp-' in p.name)


def half_written(root) -> list[str]:
    "Everything under `root` that a failed write must not leave: temporaries (`.tmp` in the name) and 0-byte files."
    root = Path(root)
    if not root.exists():
        return []
    return sorted(
        str(p.relative_to(root)) for p in root.rglob('*') if '.tmp' in p.name or (p.is_file() and p.stat().st_size == 0)
    )
