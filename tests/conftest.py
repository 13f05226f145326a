"""Fixtures and helpers that several test files share (pytest finds this file itself; the helpers are imported as
`from conftest import half_written`)."""

from pathlib import Path

import pytest


@pytest.fixture
def home(tmp_path, monkeypatch):
    "A DARTS_HOME of the test's own (an empty temporary folder): nothing it writes reaches the session's home."
    monkeypatch.setenv('DARTS_HOME', str(tmp_path))
    return tmp_path


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
