"""Nothing of the user's is ever deleted or overwritten (issue 29), each case written as an attack: an export into the
user's project, a module saved over the user's README.md or through a link, a card edited by hand, a time-to-live
short enough for another process to delete a live writer's temporary. Each case checks the error (its type, the path
and what is there) and that every byte of the user's is where it was."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
import pytest
import torch
from darts_nb.core import tiny_llama, save_dir
from darts_nb.cache import HiddenCache
from darts_nb.deploy import export_corrected, EXPORT_LIST
from darts_nb.lease import HEARTBEAT, MIN_TTL, clean_stale, hold_lease, is_stale, lease_path, lease_ttl
from darts_nb.surgery import PositionSurgery, StandardSurgery, save_surgery, load_surgery, read_surgery_config
from darts_nb.surgery import CONFIG, WEIGHTS, CARD
from conftest import temporaries

H = 16


def snapshot(path: Path):
    "Every entry under `path`: files by their bytes, links by their target, folders by name; None when absent."
    if not (path.exists() or path.is_symlink()):
        return None
    if path.is_symlink() or path.is_file():
        return os.readlink(path) if path.is_symlink() else path.read_bytes()
    out = {}
    for top, dirs, files in os.walk(path):
        for n in dirs + files:
            p = Path(top) / n
            key = str(p.relative_to(path))
            out[key] = ('link', os.readlink(p)) if p.is_symlink() else p.read_bytes() if p.is_file() else 'folder'
    return out


@pytest.fixture(scope='module')
def model():
    torch.manual_seed(0)
    return tiny_llama(hidden_size=H).eval()


def module(v=0.1):
    m = PositionSurgery(H, 2, 8)
    with torch.no_grad():
        for p in m.parameters():
            p.fill_(v)
    return m


# ---------------------------------------------------------------------------------------------------------
# export_corrected replaces its folder whole: only an earlier export holding nothing else may be replaced.


def a_project(p: Path):
    "The user's project: a git repository with code and notes (the filer's absolute project path)."
    (p / '.git' / 'refs').mkdir(parents=True)
    (p / '.git' / 'HEAD').write_text('ref: refs/heads/main\n')
    (p / 'src').mkdir()
    (p / 'src' / 'train.py').write_text('print("my work")\n')
    (p / 'README.md').write_text('# my project\n')


def a_checkpoint(p: Path):
    "A checkpoint the user saved with transformers (no export list)."
    p.mkdir()
    (p / 'config.json').write_text('{"model_type": "llama"}')
    (p / 'model.safetensors').write_bytes(b'weights')


def an_export_with_a_file_added(p: Path, model):
    export_corrected(model, module(), p)
    (p / 'eval_results.json').write_text('{"acc": 0.5}')


def an_export_with_its_card_edited(p: Path, model):
    export_corrected(model, module(), p)
    time.sleep(0.01)
    (p / 'README.md').write_text((p / 'README.md').read_text() + '\nMy notes on this model.\n')


def an_export_with_a_folder_added(p: Path, model):
    export_corrected(model, module(), p)
    (p / 'runs' / 'r1').mkdir(parents=True)


def an_export_whose_list_is_garbled(p: Path, model):
    export_corrected(model, module(), p)
    (p / EXPORT_LIST).write_text('{"files": ')


def a_link_to_an_export(p: Path, model):
    export_corrected(model, module(), p.with_name('real'))
    os.symlink(p.with_name('real'), p)


REFUSED_EXPORTS = [  # (case, make the destination, error type, what the message names)
    ("the user's project, a git repository (the filer: wiped)", lambda p, m: a_project(p), FileExistsError, '.git'),
    ('a checkpoint the user saved', lambda p, m: a_checkpoint(p), FileExistsError, 'is not an earlier export'),
    ('an earlier export with a file added', an_export_with_a_file_added, FileExistsError, "['eval_results.json']"),
    ('an earlier export with its card edited', an_export_with_its_card_edited, FileExistsError, "['README.md']"),
    ('an earlier export with a folder added', an_export_with_a_folder_added, FileExistsError, "['runs', 'runs/r1']"),
    ('an export list that does not parse', an_export_whose_list_is_garbled, FileExistsError, 'not an earlier export'),
    ('a symbolic link to an export', a_link_to_an_export, FileExistsError, 'is a symbolic link'),
    ('a file', lambda p, m: p.write_text('mine'), NotADirectoryError, 'is not a folder'),
]


@pytest.mark.parametrize('case,make,exc,names', REFUSED_EXPORTS, ids=[c[0] for c in REFUSED_EXPORTS])
def test_export_refuses_a_folder_it_did_not_write(tmp_path, model, case, make, exc, names):
    dest = tmp_path / 'dest'
    make(dest, model)
    before, around = snapshot(dest), snapshot(tmp_path)
    with pytest.raises(exc) as e:
        export_corrected(model, module(0.2), dest, domain='math')
    assert str(dest) in str(e.value), str(e.value)
    assert names in str(e.value), str(e.value)
    assert snapshot(dest) == before
    assert snapshot(tmp_path) == around  # every byte where it was, no temporary


def test_export_replaces_its_own_earlier_export_and_writes_an_empty_folder(tmp_path, model):
    out = export_corrected(model, module(0.1), tmp_path / 'x', domain='math')
    listed = json.loads((out / EXPORT_LIST).read_text())['files']
    assert {'config.json', 'modeling_darts.py', 'README.md', f'darts_surgery/{WEIGHTS}'} <= set(listed)
    export_corrected(model, StandardSurgery(H, 2), out, domain='code')  # untouched since: replaced
    assert read_surgery_config(out / 'darts_surgery')['kind'] == 'standard'
    assert temporaries(tmp_path) == []
    (tmp_path / 'empty').mkdir()
    export_corrected(model, module(), tmp_path / 'empty')
    assert (tmp_path / 'empty' / EXPORT_LIST).is_file()


# ---------------------------------------------------------------------------------------------------------
# save_surgery replaces a folder only where it wrote every file in it, and never a link.


def only_a_readme(p: Path):
    p.mkdir()
    (p / 'README.md').write_text('# my notes on the math module\n')


def a_module_with_its_card_edited(p: Path):
    save_surgery(module(), p, domain='math')
    (p / CARD).write_text((p / CARD).read_text() + '\nEvaluated by hand: good on algebra.\n')


def a_link_to_a_module(p: Path):
    save_surgery(module(), p.with_name('real'))
    os.symlink(p.with_name('real'), p)


def a_link_to_nowhere(p: Path):
    os.symlink(p.with_name('nowhere'), p)


def a_folder_named_like_the_card(p: Path):
    save_surgery(module(), p)
    (p / CARD).unlink()
    (p / CARD).mkdir()
    (p / CARD / 'figure.png').write_bytes(b'png')


REFUSED_SAVES = [  # (case, make the destination, error type, what the message names)
    ("a folder holding only the user's README.md (the filer: overwritten)", only_a_readme, "['README.md']"),
    ('a module whose card was edited by hand', a_module_with_its_card_edited, "['README.md']"),
    ('a symbolic link to a module folder (the filer: replaced by a folder)', a_link_to_a_module, 'symbolic link'),
    ('a dangling symbolic link', a_link_to_nowhere, 'symbolic link'),
    ('a folder where the card should be', a_folder_named_like_the_card, "['README.md']"),
]


@pytest.mark.parametrize('case,make,names', REFUSED_SAVES, ids=[c[0] for c in REFUSED_SAVES])
def test_save_refuses_what_it_did_not_write(tmp_path, case, make, names):
    dest = tmp_path / 'dest'
    make(dest)
    around = snapshot(tmp_path)
    with pytest.raises(FileExistsError) as e:
        save_surgery(module(0.5), dest, domain='code')
    assert str(dest) in str(e.value), str(e.value)
    assert names in str(e.value), str(e.value)
    assert snapshot(tmp_path) == around


def test_a_cache_is_not_saved_through_a_link_either(tmp_path):
    "save_dir is shared: HiddenCache.save refuses a link the same way."
    c = HiddenCache(torch.zeros(1, 2, 4), torch.zeros(1, 2, 4), torch.zeros(1, 2), torch.ones(1, 2, dtype=bool), {})
    real = c.save(tmp_path / 'real')
    os.symlink(real, tmp_path / 'link')
    around = snapshot(tmp_path)
    with pytest.raises(FileExistsError, match='is a symbolic link'):
        c.save(tmp_path / 'link')
    with pytest.raises(FileExistsError, match='is a symbolic link'):
        save_dir(tmp_path / 'link', {'a': b'1'}, {'a'}, 'thing')
    assert snapshot(tmp_path) == around


def test_a_module_saved_by_this_version_is_replaced(tmp_path):
    "The refusals above leave the ordinary case alone: a module's own folder, card untouched, is replaced."
    p = save_surgery(module(0.1), tmp_path / 'm', domain='math')
    save_surgery(module(0.2), p, domain='math')
    assert torch.equal(load_surgery(p).b, module(0.2).b)
    assert sorted(os.listdir(p)) == sorted([CONFIG, WEIGHTS, CARD])
    assert temporaries(tmp_path) == []


# ---------------------------------------------------------------------------------------------------------
# Leases: a time-to-live below twice the heartbeat would let another process delete a live writer's temporary.

JUDGE = textwrap.dedent('''
    import json, sys
    from darts_nb.lease import clean_stale
    try:
        print(json.dumps([str(p) for p in clean_stale(sys.argv[1])]))
    except ValueError as e:
        print(json.dumps(str(e)))
''')


def judge(folder: Path, ttl: str):
    "Another process's clean_stale on `folder` with DARTS_LEASE_TTL=ttl: what it removed, or its error."
    env = {**os.environ, 'DARTS_LEASE_TTL': ttl}
    r = subprocess.run([sys.executable, '-c', JUDGE, str(folder)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_short_ttl_cannot_delete_a_live_writers_temporary(tmp_path):
    "The filer's race: a writer alive on this machine, 18 s after its last beat; a judge with DARTS_LEASE_TTL=5."
    tmp = tmp_path / '.ta-0.5.tmp-1-ab'
    tmp.mkdir()
    (tmp / 'model.safetensors').write_bytes(b'half written')
    with hold_lease(tmp):  # this process writes it, beating every HEARTBEAT seconds
        lease = json.loads(lease_path(tmp).read_text())
        lease_path(tmp).write_text(json.dumps({**lease, 'heartbeat': time.time() - 18}))  # 18 s since its last beat
        err = judge(tmp_path, '5')
        assert isinstance(err, str), err
        assert "DARTS_LEASE_TTL='5': expected a number of seconds >= 60" in err, err
        assert tmp.exists()
        assert judge(tmp_path, str(MIN_TTL)) == []
        assert tmp.exists()  # the shortest time-to-live allowed keeps it
        assert not is_stale(tmp, ttl=MIN_TTL, now=time.time() + HEARTBEAT)  # and would until a full beat is missed
    # the refusal keeps the sweep: a writer gone from this machine is found at once, whatever its heartbeat
    dead = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'], capture_output=True, text=True)
    lease_path(tmp).write_text(json.dumps({**lease, 'pid': int(dead.stdout), 'heartbeat': time.time()}))
    assert judge(tmp_path, str(MIN_TTL)) == [str(tmp)]
    assert not tmp.exists()


@pytest.mark.parametrize('ttl', ['5', '18', '59.9', '30'])
def test_lease_ttls_below_twice_the_heartbeat_are_refused(monkeypatch, tmp_path, ttl):
    monkeypatch.setenv('DARTS_LEASE_TTL', ttl)
    with pytest.raises(ValueError, match=f"DARTS_LEASE_TTL='{ttl}': expected a number of seconds >= 60"):
        lease_ttl()
    (tmp_path / '.x.tmp-1-ab').mkdir()
    with pytest.raises(ValueError, match='DARTS_LEASE_TTL'):
        clean_stale(tmp_path)
    monkeypatch.delenv('DARTS_LEASE_TTL')
    with pytest.raises(ValueError, match='ttl: expected a number of seconds >= 60') as e:
        clean_stale(tmp_path, ttl=float(ttl))
    assert str(e.value).endswith(f'got {float(ttl)}')
    assert (tmp_path / '.x.tmp-1-ab').exists()
    monkeypatch.setenv('DARTS_LEASE_TTL', 'inf')  # never judged by age: kept (a dead writer here is still found)
    assert lease_ttl() == float('inf')
    assert clean_stale(tmp_path) == []


def test_a_writer_may_not_beat_less_often_than_the_heartbeat(tmp_path):
    with pytest.raises(ValueError, match=r'every: expected a number of seconds in \(0, 30\]'):
        with hold_lease(tmp_path / '.x.tmp-1-ab', every=HEARTBEAT * 2):
            pass
    assert not lease_path(tmp_path / '.x.tmp-1-ab').exists()
