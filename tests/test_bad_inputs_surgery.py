"""Bad-input and fault table for the surgery modules, training and the hidden-state cache (issue 16; issue 17's names).

Every case is either a clear error (its type, and a message naming the path, argument or value) or a correct
result, and every case checks that nothing half-written is left: no temporary sibling, and the destination
absent or complete (the previous content where a save failed)."""

import errno
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import pytest
import torch
from safetensors.torch import save_file
from darts_nb import core
from darts_nb.cache import HiddenCache, TENSORS, META, cache_key, cache_path, get_or_build_cache, CacheSettings
from darts_nb import cache as cache_mod
from darts_nb.core import tiny_llama
from darts_nb.surgery import (
    PositionSurgery,
    StandardSurgery,
    TokenSurgery,
    save_surgery,
    load_surgery,
    read_surgery_config,
    attach_surgery,
    surgery_of,
    CONFIG,
    WEIGHTS,
    CARD,
    OLD_CONFIG,
    OLD_WEIGHTS,
)
from darts_nb.train import train_surgery, TrainSettings
from conftest import temporaries

H = 8


def filled(value, cls=PositionSurgery):
    "A module whose every parameter is `value` (so a mix of two versions is visible)."
    m = cls(H, 2, 4) if cls is not StandardSurgery else cls(H, 2)
    with torch.no_grad():
        for p in m.parameters():
            p.fill_(value)
    return m


def snapshot(path):
    "Name -> bytes of every file under `path` (None when it does not exist)."
    path = pathlib.Path(path)
    if not path.exists():
        return None
    if path.is_file():
        return path.read_bytes()
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob('*')) if p.is_file()}


def same_module(m, value):
    return all(torch.equal(t, torch.full_like(t, value)) for t in m.state_dict().values())


def write_old(path, module, **meta):
    "A module folder in the format before issue 17: config.json + surgery.safetensors."
    path.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in module.state_dict().items()}, str(path / OLD_WEIGHTS))
    (path / OLD_CONFIG).write_text(json.dumps({**module.config(), 'version': '0.0.1', 'dtype': 'float32', **meta}))
    return path


# ---------------------------------------------------------------------------------------------------------
# Saving a module: what is at the destination before, and what must happen.


def model_dir(p):
    p.mkdir()
    (p / 'model.safetensors').write_bytes(b'model weights')
    (p / 'config.json').write_text('{"model_type": "llama"}')
    return p


def model_config_only(p):
    p.mkdir()
    (p / 'config.json').write_text('{"model_type": "llama"}')
    return p


def module_and_notes(p):
    save_surgery(filled(1.0), p)
    (p / 'notes.txt').write_text('notes')
    return p  # README.md is the module's own card


def a_file(p):
    p.write_text('a file')
    return p


REFUSED_DESTINATIONS = [  # (case, make the destination, error type, what the message must name)
    ('a model folder (issue 16: the model was deleted)', model_dir, FileExistsError, 'model.safetensors'),
    ("a folder holding only a model's config.json", model_config_only, FileExistsError, "['config.json']"),
    ('a module folder with notes beside it', module_and_notes, FileExistsError, 'notes.txt'),
    ('a file', a_file, NotADirectoryError, 'not a folder'),
]


@pytest.mark.parametrize('case,make,exc,names', REFUSED_DESTINATIONS, ids=[c[0] for c in REFUSED_DESTINATIONS])
def test_save_refuses_a_destination_with_other_files(tmp_path, case, make, exc, names):
    dest = make(tmp_path / 'dest')
    before = snapshot(dest)
    with pytest.raises(exc) as e:
        save_surgery(filled(2.0), dest)
    assert str(dest) in str(e.value)
    assert names in str(e.value)
    assert snapshot(dest) == before
    assert temporaries(tmp_path) == []  # nothing lost, nothing half-written


REPLACED_DESTINATIONS = [  # (case, make the destination)
    ('nothing there', lambda p: None),
    ('an empty folder', lambda p: p.mkdir()),
    ('a module of the current format', lambda p: save_surgery(filled(1.0), p)),
    ('a module of the old format', lambda p: write_old(p, filled(1.0))),
    ('an old module without its weights', lambda p: (write_old(p, filled(1.0)), (p / OLD_WEIGHTS).unlink())),
]


@pytest.mark.parametrize('case,make', REPLACED_DESTINATIONS, ids=[c[0] for c in REPLACED_DESTINATIONS])
def test_save_replaces_a_module_folder(tmp_path, case, make):
    dest = tmp_path / 'dest'
    make(dest)
    save_surgery(filled(2.0), dest, domain='code', seed=5)
    assert sorted(os.listdir(dest)) == sorted(
        [CONFIG, WEIGHTS, CARD]
    )  # the old format's files are the module's own: gone
    m = load_surgery(dest)
    assert same_module(m, 2.0)
    assert m.meta['seed'] == 5
    assert temporaries(tmp_path) == []


def test_config_holds_the_provenance(tmp_path):
    import darts_nb
    import yaml

    merge = tmp_path / 'ta-0.5'
    merge.mkdir()
    (merge / 'merge.yaml').write_text(yaml.safe_dump({'merge_method': 'task_arithmetic'}))
    p = save_surgery(
        filled(1.0),
        tmp_path / 'm',
        merged_model=str(merge),
        expert='org/code-expert',
        domain='code',
        loss='ewl1',
        seed=3,
    )
    cfg = json.loads((p / CONFIG).read_text())
    assert {
        k: cfg[k] for k in ('kind', 'hidden_size', 'rank', 'max_len', 'domain', 'loss', 'seed', 'expert', 'version')
    } == dict(
        kind='position',
        hidden_size=H,
        rank=2,
        max_len=4,
        domain='code',
        loss='ewl1',
        seed=3,
        expert='org/code-expert',
        version=darts_nb.__version__,
    )
    assert cfg['merged_model'] == str(merge)
    assert cfg['merge_config_hash'] == core.stable_hash({'merge_method': 'task_arithmetic'})
    assert (
        json.loads((save_surgery(filled(1.0), tmp_path / 'n', merged_model='org/hub-merge') / CONFIG).read_text())[
            'merge_config_hash'
        ]
        is None
    )


# ---------------------------------------------------------------------------------------------------------
# Loading: bad folders and files. Each (case, damage applied to a saved folder, error type, text the message holds).


def _cfg(p, name=CONFIG):
    return json.loads((p / name).read_text())


def _put(p, cfg, name=CONFIG):
    (p / name).write_text(json.dumps(cfg))


def drop_key(key, name=CONFIG):
    def f(p):
        c = _cfg(p, name)
        del c[key]
        _put(p, c, name)

    return f


def set_key(key, value):
    def f(p):
        c = _cfg(p)
        c[key] = value
        _put(p, c)

    return f


def truncate(name):
    def f(p):
        b = (p / name).read_bytes()
        (p / name).write_bytes(b[: len(b) // 2])

    return f


def nan_weights(p):
    m = filled(1.0)
    sd = {k: v.clone() for k, v in m.state_dict().items()}
    sd['b'][1, 2] = float('nan')
    save_file(sd, str(p / WEIGHTS))


def make_old(p):
    shutil.rmtree(p)
    write_old(p, filled(1.0))


LOAD_CASES = [
    (
        'no folder',
        lambda p: shutil.rmtree(p),
        FileNotFoundError,
        f'expected {CONFIG} + {WEIGHTS}, or the old {OLD_CONFIG} + {OLD_WEIGHTS}',
    ),
    (
        'an empty folder',
        lambda p: [f.unlink() for f in p.iterdir()],
        FileNotFoundError,
        f'expected {CONFIG} + {WEIGHTS}',
    ),
    (
        'a model folder',
        lambda p: (shutil.rmtree(p), model_dir(p)),
        FileNotFoundError,
        "holds ['config.json', 'model.safetensors']",
    ),
    ('weights missing', lambda p: (p / WEIGHTS).unlink(), FileNotFoundError, f'missing {WEIGHTS}'),
    ('config missing', lambda p: (p / CONFIG).unlink(), FileNotFoundError, f'expected {CONFIG}'),
    ('config without max_len (issue 16)', drop_key('max_len'), ValueError, "missing key 'max_len'"),
    ('config without hidden_size', drop_key('hidden_size'), ValueError, "missing key 'hidden_size'"),
    ('config without rank', drop_key('rank'), ValueError, "missing key 'rank'"),
    ('config without kind', drop_key('kind'), ValueError, 'kind=None'),
    ('max_len a string', set_key('max_len', '4'), ValueError, "max_len: expected an integer >= 1, got '4'"),
    ('rank 0', set_key('rank', 0), ValueError, 'rank: expected an integer >= 1, got 0'),
    ('max_len that does not match the weights', set_key('max_len', 5), ValueError, 'do not match'),
    ('garbled config', lambda p: (p / CONFIG).write_text('{"kind": "posi'), ValueError, 'corrupt JSON'),
    ('config not a dict', lambda p: (p / CONFIG).write_text('[1, 2]'), ValueError, 'kind=None'),
    ('truncated weights', truncate(WEIGHTS), ValueError, 'corrupt safetensors'),
    ('garbage weights', lambda p: (p / WEIGHTS).write_bytes(b'\x00' * 7), ValueError, 'corrupt safetensors'),
    ('NaN in the weights', nan_weights, ValueError, "NaN or inf in ['b']"),
    (
        'old format without max_len',
        lambda p: (make_old(p), drop_key('max_len', OLD_CONFIG)(p)),
        ValueError,
        "missing key 'max_len'",
    ),
]


@pytest.mark.parametrize('case,damage,exc,text', LOAD_CASES, ids=[c[0] for c in LOAD_CASES])
def test_load_errors_name_the_file(tmp_path, case, damage, exc, text):
    p = save_surgery(filled(1.0), tmp_path / 'm')
    damage(p)
    with pytest.raises(exc) as e:
        load_surgery(p)
    assert str(p) in str(e.value), str(e.value)
    assert text in str(e.value), str(e.value)
    if (
        exc is ValueError
        and case != 'max_len that does not match the weights'
        and 'weights' not in case
        and 'NaN' not in case
    ):
        with pytest.raises(exc):
            read_surgery_config(p)  # the config alone is refused the same way


def test_old_format_loads(tmp_path):
    p = write_old(tmp_path / 'old', filled(3.0), domain='math', seed=1)
    m = load_surgery(p, expect_hidden=H)
    assert same_module(m, 3.0)
    assert m.meta['domain'] == 'math'
    assert read_surgery_config(p)['kind'] == 'position'
    t = TokenSurgery(H, 2, vocab_size=10)
    q = write_old(tmp_path / 'tok', t)
    c = _cfg(q, OLD_CONFIG)
    del c['vocab_size']
    _put(q, c, OLD_CONFIG)
    with pytest.raises(ValueError, match="missing key 'vocab_size'"):
        load_surgery(q)


# ---------------------------------------------------------------------------------------------------------
# A module with NaN or inf can never be saved, loaded or attached.


@pytest.mark.parametrize('bad', [float('nan'), float('inf'), -float('inf')])
def test_nonfinite_module_is_refused_everywhere(tmp_path, bad):
    m = filled(1.0)
    with torch.no_grad():
        m.up.weight[0, 0] = bad
    prev = save_surgery(filled(2.0), tmp_path / 'm')
    before = snapshot(prev)
    with pytest.raises(ValueError, match=r"NaN or inf in \['up.weight'\]") as e:
        save_surgery(m, prev)
    assert str(prev) in str(e.value)
    assert snapshot(prev) == before
    assert temporaries(tmp_path) == []
    model = tiny_llama(hidden_size=H)
    with pytest.raises(ValueError, match='attach_surgery.*NaN or inf'):
        attach_surgery(model, m)
    assert surgery_of(model) is None


# ---------------------------------------------------------------------------------------------------------
# A save interrupted at any point leaves the previous module complete, and nothing half-written.


def fail_nth_write(n, exc):
    orig = pathlib.Path.write_bytes
    calls = [0]

    def write_bytes(self, data):
        calls[0] += 1
        if calls[0] == n:
            orig(self, data[: len(data) // 2])
            raise exc  # half of the file written, then the fault
        return orig(self, data)

    return write_bytes


def raise_(exc):
    def f(*a, **k):
        raise exc

    return f


ENOSPC = OSError(errno.ENOSPC, 'No space left on device')
INTERRUPTIONS = [  # (case, (object, attribute, replacement), error type, text)
    (
        'serialising the weights',
        ('safetensors.torch', 'save', raise_(RuntimeError('boom in serialise'))),
        RuntimeError,
        'boom in serialise',
    ),
    (
        'disk full writing the weights',
        (pathlib.Path, 'write_bytes', fail_nth_write(1, ENOSPC)),
        OSError,
        'no space left on the device while writing',
    ),
    (
        'disk full writing the config',
        (pathlib.Path, 'write_bytes', fail_nth_write(2, ENOSPC)),
        OSError,
        'no space left on the device while writing',
    ),
    (
        'I/O error writing the config',
        (pathlib.Path, 'write_bytes', fail_nth_write(2, OSError(errno.EIO, 'I/O error'))),
        OSError,
        'I/O error',
    ),
    (
        'Ctrl-C writing the weights',
        (pathlib.Path, 'write_bytes', fail_nth_write(1, KeyboardInterrupt())),
        KeyboardInterrupt,
        '',
    ),
    (
        'the swap into place fails',
        (core, '_exchange', raise_(OSError(errno.EIO, 'exchange failed'))),
        OSError,
        'exchange failed',
    ),
]


@pytest.mark.parametrize('case,patch,exc,text', INTERRUPTIONS, ids=[c[0] for c in INTERRUPTIONS])
def test_interrupted_save_keeps_the_previous_module(tmp_path, monkeypatch, case, patch, exc, text):
    p = save_surgery(filled(1.0), tmp_path / 'm', seed=1)
    before = snapshot(p)
    obj, attr, fn = patch
    monkeypatch.setattr(__import__(obj, fromlist=['x']) if isinstance(obj, str) else obj, attr, fn)
    with pytest.raises(exc) as e:
        save_surgery(filled(2.0), p, seed=2)
    assert text in str(e.value)
    if 'space' in text:
        assert e.value.errno == errno.ENOSPC
        assert str(p) in str(e.value)
    monkeypatch.undo()
    assert snapshot(p) == before
    assert temporaries(tmp_path) == []
    m = load_surgery(p)
    assert same_module(m, 1.0)
    assert m.meta['seed'] == 1


def test_disk_full_on_a_new_destination_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(pathlib.Path, 'write_bytes', fail_nth_write(1, ENOSPC))
    with pytest.raises(OSError, match='no space left') as e:
        save_surgery(filled(2.0), tmp_path / 'new')
    assert e.value.errno == errno.ENOSPC
    assert str(tmp_path / 'new') in str(e.value)
    assert os.listdir(tmp_path) == []


CHILD_SAVER = textwrap.dedent('''
    import sys, torch
    from darts_nb.surgery import PositionSurgery, save_surgery
    def filled(v):
        m = PositionSurgery(8, 2, 4)
        with torch.no_grad():
            for p in m.parameters(): p.fill_(v)
        return m
    a, b = filled(1.), filled(2.)
    print('ready', flush=True)
    i = 0
    while True:
        v = 1. + i % 2; save_surgery(a if v == 1. else b, sys.argv[1], seed=int(v)); i += 1
''')


def test_sigkill_during_saves_never_leaves_the_destination_incomplete(tmp_path):
    "A child saves two versions in a loop; the parent loads meanwhile, then SIGKILLs it: each load is a whole version."
    p = save_surgery(filled(1.0), tmp_path / 'm', seed=1)
    child = subprocess.Popen([sys.executable, '-c', CHILD_SAVER, str(p)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == 'ready'
        seen, t0 = set(), time.time()
        while time.time() - t0 < 2:
            m = load_surgery(p)
            v = m.meta['seed']
            assert same_module(m, float(v)), f'a mix of two versions: config of {v}, other weights'
            seen.add(v)
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    m = load_surgery(p)
    assert same_module(m, float(m.meta['seed']))
    assert sorted(os.listdir(p)) == sorted([CONFIG, WEIGHTS, CARD])
    assert seen == {1, 2}  # the loads really ran during the saves
    assert os.listdir(tmp_path) == ['m'] or all(n.startswith('.m.tmp-') for n in os.listdir(tmp_path) if n != 'm')


# ---------------------------------------------------------------------------------------------------------
# Training: invalid hyper-parameters are refused up front; divergence stops with a clear error.


def tiny_cache(n=8, T=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(n, T, dtype=torch.bool)
    mask[::2, :2] = False
    hm = torch.randn(n, T, H, generator=g)
    hk = hm + 0.3 * torch.randn(T, H, generator=g)
    hm, hk = hm * mask[..., None], hk * mask[..., None]
    return HiddenCache(hm.bfloat16(), hk.bfloat16(), torch.rand(n, T, generator=g) * mask, mask, {})


BAD_ARGS = [  # (keyword, value, text)
    ('lr', float('inf'), 'lr: expected a finite number > 0, got inf'),
    ('lr', float('nan'), 'got nan'),
    ('lr', 0.0, 'got 0.0'),
    ('lr', -1e-3, 'got -0.001'),
    ('lr', '1e-3', "got '1e-3'"),
    ('lr', True, 'got True'),
    ('iters', 0, 'iters'),
    ('iters', 2.5, 'iters'),
    ('batch_size', 0, 'batch_size'),
    ('betas', (1.0, 0.999), 'betas'),
    ('betas', (0.9,), 'betas'),
    ('betas', (0.9, float('nan')), 'betas'),
    ('seed', 1.5, 'seed'),
]


@pytest.mark.parametrize('kw,value,text', BAD_ARGS, ids=[f'{k}={v!r}' for k, v, _ in BAD_ARGS])
def test_bad_hyperparameters_are_refused_up_front(kw, value, text):
    m = filled(0.5)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    with pytest.raises(ValueError, match=kw) as e:
        train_surgery(m, tiny_cache(), TrainSettings(loss='l1', **{'iters': 3, kw: value}), progress=False)
    assert text in str(e.value)
    assert all(torch.equal(v, before[k]) for k, v in m.state_dict().items())  # not a single step taken


def test_divergence_stops_with_the_step_loss_and_lr():
    torch.manual_seed(0)
    m = PositionSurgery(H, 2, 8)
    with pytest.raises(FloatingPointError) as e:
        train_surgery(m, tiny_cache(), TrainSettings(loss='l1', iters=5, lr=1e30), progress=False)
    msg = str(e.value)
    assert 'at step 2 of 5' in msg
    assert 'lr=1e+30' in msg
    assert 'loss value' in msg


def test_nonfinite_gradient_stops_training():
    "A finite loss whose gradient is inf: the parameter check catches the step that makes the weights NaN."
    torch.manual_seed(0)
    m = PositionSurgery(H, 2, 8)

    def hook(grad):
        return torch.full_like(grad, float('inf'))

    m.b.register_hook(hook)
    with pytest.raises(FloatingPointError, match='a parameter became NaN or inf at step 1 of 4'):
        train_surgery(m, tiny_cache(), TrainSettings(loss='l1', iters=4), progress=False)


@pytest.mark.parametrize('bad', [float('nan'), float('inf')])
@pytest.mark.parametrize('loss', ['l1', 'ewl1', 'kl'])
def test_nonfinite_values_at_pads_do_not_poison_training(bad, loss):
    clean, poisoned = tiny_cache(), tiny_cache()
    pad = ~poisoned.mask
    poisoned.merged[pad] = bad
    poisoned.target[pad] = bad
    poisoned.entropy[pad] = bad
    head = torch.nn.Linear(H, 12, bias=False)

    def run(c):
        torch.manual_seed(0)
        m = PositionSurgery(H, 2, 8)
        return train_surgery(
            m, c, TrainSettings(loss=loss, iters=6, lr=1e-2, batch_size=4), head=head, progress=False
        ), m

    (h1, m1), (h2, m2) = run(clean), run(poisoned)
    assert h1 == h2
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
    assert all(torch.isfinite(v).all() for v in m2.state_dict().values())


# ---------------------------------------------------------------------------------------------------------
# The hidden-state cache: concurrent saves and loads, damage, a full disk, folders with other files.


def versioned_cache(v, N=4, T=32, Hc=64):
    "A cache whose every value and its meta say `v` (float32: every v exact)."

    def f(*s):
        return torch.full(s, float(v))

    return HiddenCache(f(N, T, Hc), f(N, T, Hc), f(N, T), torch.ones(N, T, dtype=torch.bool), {'v': v})


def whole(c):
    v = c.meta['v']
    return all(bool((t.float() == v).all()) for t in (c.merged, c.target, c.entropy))


def test_concurrent_cache_saves_and_loads_threads(tmp_path):
    p = tmp_path / 'c'
    errors, seen, stop = [], set(), threading.Event()
    start = threading.Barrier(6)

    def saver(k):
        start.wait()
        for i in range(30):
            try:
                versioned_cache(k * 100 + i).save(p)
            except Exception as e:
                errors.append(('save', repr(e)))

    def loader():
        start.wait()
        while not stop.is_set():
            if not (p / TENSORS).exists():
                continue  # before the first save finished
            try:
                c = HiddenCache.load(p, device='cpu')
                if not whole(c):
                    errors.append(('mix', c.meta['v']))
                seen.add(c.meta['v'])
            except Exception as e:
                errors.append(('load', repr(e)))

    savers = [threading.Thread(target=saver, args=(k,)) for k in range(1, 5)]  # 4 savers race to create the folder
    loaders = [threading.Thread(target=loader) for _ in range(2)]
    for t in savers + loaders:
        t.start()
    for t in savers:
        t.join()
    stop.set()
    for t in loaders:
        t.join()
    assert errors == []
    assert len(seen) > 1
    assert whole(HiddenCache.load(p, device='cpu'))
    assert temporaries(tmp_path) == []
    assert sorted(os.listdir(p)) == [META, TENSORS]


CHILD_CACHE_SAVER = textwrap.dedent('''
    import sys, torch
    from darts_nb.cache import HiddenCache
    def f(v, *s):
        return torch.full(s, float(v))
    print('ready', flush=True)
    for i in range(10**9):
        mask = torch.ones(4, 32, dtype=torch.bool)
        HiddenCache(f(i, 4, 32, 64), f(i, 4, 32, 64), f(i, 4, 32), mask, {'v': i}).save(sys.argv[1])
''')


def test_concurrent_cache_save_and_load_processes(tmp_path):
    p = versioned_cache(-1).save(tmp_path / 'c')
    seen = set()
    child = subprocess.Popen([sys.executable, '-c', CHILD_CACHE_SAVER, str(p)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == 'ready'
        t0 = time.time()
        while time.time() - t0 < 2:
            c = HiddenCache.load(p, device='cpu')
            assert whole(c)
            seen.add(c.meta['v'])
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert len(seen) > 2
    assert whole(HiddenCache.load(p, device='cpu'))


def _old_format_cache(p):
    "A cache saved before the meta was kept in the safetensors header: meta.json only."
    c = versioned_cache(7)
    p.mkdir()
    save_file({k: t.contiguous() for k, t in c.tensors().items()}, str(p / TENSORS))
    (p / META).write_text(json.dumps(c.meta))


def _only_merged(p):
    save_file({'merged': torch.zeros(2, 3, 4)}, str(p / TENSORS), metadata={'meta': '{}'})


def _wrong_shapes(p):
    save_file(
        {
            'merged': torch.zeros(2, 3, 4),
            'target': torch.zeros(2, 3, 4),
            'entropy': torch.zeros(2, 5),
            'mask': torch.ones(2, 3, dtype=torch.bool),
        },
        str(p / TENSORS),
        metadata={'meta': '{}'},
    )


def _old_garbled_meta(p):
    shutil.rmtree(p)
    _old_format_cache(p)
    (p / META).write_text('{"v": ')


CACHE_LOADS = [  # (case, damage, error type or None for a correct load, text)
    ('no folder', lambda p: shutil.rmtree(p), FileNotFoundError, 'is not a saved HiddenCache'),
    ('tensors missing', lambda p: (p / TENSORS).unlink(), FileNotFoundError, f'needs {TENSORS} and {META}'),
    ('truncated tensors', truncate(TENSORS), ValueError, 'corrupt or incomplete cache file'),
    ('a 0-byte tensors file', lambda p: (p / TENSORS).write_bytes(b''), ValueError, 'corrupt or incomplete cache file'),
    ('tensors missing from the file', _only_merged, ValueError, "missing tensors ['entropy', 'mask', 'target']"),
    ('shapes that disagree', _wrong_shapes, ValueError, 'entropy: expected shape (2, 3)'),
    ('an old cache (meta.json only) loads', lambda p: (shutil.rmtree(p), _old_format_cache(p)), None, ''),
    ('an old cache with a garbled meta.json', _old_garbled_meta, ValueError, 'corrupt JSON'),
    ('meta.json garbled in a new cache: the header has it', lambda p: (p / META).write_text('{"v": '), None, ''),
]


@pytest.mark.parametrize('case,damage,exc,text', CACHE_LOADS, ids=[c[0] for c in CACHE_LOADS])
def test_cache_load_table(tmp_path, case, damage, exc, text):
    p = versioned_cache(7).save(tmp_path / 'c')
    damage(p)
    if exc is None:
        assert whole(HiddenCache.load(p, device='cpu'))
        return
    with pytest.raises(exc) as e:
        HiddenCache.load(p, device='cpu')
    assert str(p) in str(e.value), str(e.value)
    assert text in str(e.value), str(e.value)


@pytest.mark.parametrize(
    'case,make,exc,names',
    REFUSED_DESTINATIONS[:2] + REFUSED_DESTINATIONS[3:],
    ids=[c[0] for c in REFUSED_DESTINATIONS[:2] + REFUSED_DESTINATIONS[3:]],
)
def test_cache_save_refuses_a_folder_with_other_files(tmp_path, case, make, exc, names):
    dest = make(tmp_path / 'dest')
    before = snapshot(dest)
    with pytest.raises(exc) as e:
        versioned_cache(1).save(dest)
    assert str(dest) in str(e.value)
    assert names in str(e.value)
    assert snapshot(dest) == before
    assert temporaries(tmp_path) == []


def _fail_safetensors(monkeypatch):
    import safetensors.torch as st
    from safetensors import SafetensorError

    orig = st.save_file

    def save_file(
        tensors, filename, metadata=None
    ):  # what safetensors raises on a full disk (checked on a real tmpfs below)
        orig(tensors, filename, metadata)
        pathlib.Path(filename).write_bytes(b'half')
        raise SafetensorError('Error while serializing: I/O error: No space left on device (os error 28)')

    monkeypatch.setattr(st, 'save_file', save_file)


@pytest.mark.parametrize('where', ['tensors', 'meta'])
@pytest.mark.parametrize('existing', [False, True])
def test_cache_disk_full(tmp_path, monkeypatch, where, existing):
    p = tmp_path / 'c'
    if existing:
        versioned_cache(1).save(p)
    before = snapshot(p)
    if where == 'tensors':
        _fail_safetensors(monkeypatch)
    else:
        monkeypatch.setattr(pathlib.Path, 'write_bytes', fail_nth_write(1, ENOSPC))
    with pytest.raises(OSError) as e:
        versioned_cache(2).save(p)
    assert e.value.errno == errno.ENOSPC
    assert f'no space left on the device while writing {p}' in str(e.value)
    monkeypatch.undo()
    assert snapshot(p) == before
    assert temporaries(tmp_path) == []  # the old cache, or nothing: no partial file
    if existing:
        assert HiddenCache.load(p, device='cpu').meta['v'] == 1


REAL_FULL_DISK = textwrap.dedent('''
    import errno, json, os, sys, torch
    from darts_nb.cache import HiddenCache
    from darts_nb.surgery import PositionSurgery, save_surgery, load_surgery
    d = sys.argv[1]
    out = {}
    def f(v, *s):
        return torch.full(s, float(v))
    def ones(*s):
        return torch.ones(*s, dtype=torch.bool)
    small = HiddenCache(f(1, 1, 4, 8), f(1, 1, 4, 8), f(1, 1, 4), ones(1, 4), {'v': 1}).save(d + '/c')
    save_surgery(PositionSurgery(8, 2, 4), d + '/m', seed=1)
    big = HiddenCache(f(2, 8, 128, 256), f(2, 8, 128, 256), f(2, 8, 128), ones(8, 128), {'v': 2})
    saves = {
        'cache': lambda: big.save(d + '/c'),
        'module': lambda: save_surgery(PositionSurgery(512, 2, 512), d + '/m', seed=2),
    }
    for name, fn in saves.items():
        try:
            fn()
            out[name] = 'saved'
        except OSError as e:
            out[name] = [e.errno, str(e)]
    out['files'] = sorted(os.listdir(d)) + sorted(os.listdir(d + '/c')) + sorted(os.listdir(d + '/m'))
    out['cache_v'] = HiddenCache.load(d + '/c', device='cpu').meta['v']
    out['module_seed'] = load_surgery(d + '/m').meta['seed']
    print(json.dumps(out))
''')


def test_real_full_disk_on_a_tiny_tmpfs(tmp_path):
    "On a real 256 KiB tmpfs (a private mount namespace): both saves fail clearly; the previous cache and module stay."
    if not shutil.which('unshare'):
        pytest.skip('unshare is not installed: no private tmpfs')
    d = tmp_path / 'full'
    d.mkdir()
    cmd = f'mount -t tmpfs -o size=256k tmpfs {d} && exec {sys.executable} -c "$0" {d}'
    r = subprocess.run(['unshare', '-rm', 'sh', '-c', cmd, REAL_FULL_DISK], capture_output=True, text=True, timeout=120)
    if 'mount' in r.stderr and r.returncode != 0 and 'Traceback' not in r.stderr:
        pytest.skip(f'no private tmpfs here: {r.stderr.strip()}')
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for name, path in (('cache', f'{d}/c'), ('module', f'{d}/m')):
        assert out[name][0] == errno.ENOSPC, out
        assert f'no space left on the device while writing {path}' in out[name][1], out
    assert out["files"] == [
        "c",
        "m",
        META,
        TENSORS,
        *sorted([CONFIG, WEIGHTS, CARD]),
    ]  # no temporary sibling, no partial file
    assert out['cache_v'] == 1
    assert out['module_seed'] == 1


# ---------------------------------------------------------------------------------------------------------
# The cache key: a cache computed from other inputs is never returned.


@pytest.fixture
def fake_build(monkeypatch):
    "`build_cache` replaced by a stub recording its calls; the cache it returns says which inputs it came from."
    calls = []

    def build_cache(m, t, tok, prompts, settings, device, target_tokenizer=None, progress=True, spans=None):
        max_len = settings.max_len
        calls.append((m, t, tuple(prompts), max_len, spans))
        c = versioned_cache(len(calls), N=len(prompts), T=max_len, Hc=4)
        c.meta.update(prompt_hash=core.stable_hash(list(prompts)), max_len=max_len)
        return c

    monkeypatch.setattr(cache_mod, 'build_cache', build_cache)
    return calls


def _ckpt(p, content='w'):
    p.mkdir(exist_ok=True)
    (p / 'model.safetensors').write_text(content)
    (p / 'config.json').write_text('{}')
    return p


def _get(root, merged, expert, prompts=('a', 'b'), max_len=4, spans=None):
    return get_or_build_cache(
        merged,
        expert,
        list(prompts),
        settings=CacheSettings(max_len=max_len),
        device='cpu',
        root=root,
        progress=False,
        models=lambda path: (f'model:{path}', None),
        spans=spans,
    )


def test_cache_key_inputs(tmp_path, fake_build):
    root, m, e = tmp_path / 'caches', _ckpt(tmp_path / 'merged'), _ckpt(tmp_path / 'expert')
    first = _get(root, m, e)
    assert _get(root, m, e).meta['v'] == first.meta['v'] == 1
    assert len(fake_build) == 1  # reused
    variants = [
        ('other prompts', dict(prompts=('a', 'c'))),
        ('other max_len', dict(max_len=5)),
        ('spans', dict(spans=[[(0, 1, 'slot')], []])),
        ('other expert', dict(expert=_ckpt(tmp_path / 'expert2'))),
    ]
    for i, (case, kw) in enumerate(variants, 2):
        args = dict(merged=m, expert=e)
        args.update({k: v for k, v in kw.items() if k in args})
        c = _get(root, args['merged'], args['expert'], **{k: v for k, v in kw.items() if k not in args})
        assert c.meta['v'] == i, case
        assert len(fake_build) == i, case
    time.sleep(0.01)
    _ckpt(m, 'merge redone')  # a merge redone under the same name
    assert _get(root, m, e).meta['v'] == len(variants) + 2
    assert cache_path(m, e, ['a', 'b'], 4, root=root) != cache_path(tmp_path / 'expert', m, ['a', 'b'], 4, root=root)
    assert temporaries(root) == []


def test_cache_for_other_inputs_at_the_path_is_not_returned(tmp_path, fake_build):
    root, m, e = tmp_path / 'caches', _ckpt(tmp_path / 'merged'), _ckpt(tmp_path / 'expert')
    other = _get(root, m, e, prompts=('a', 'b'), max_len=4)  # v=1, for (m, e)
    p_other = cache_path(m, e, ['a', 'b'], 4, root=root)
    e2 = _ckpt(tmp_path / 'expert2')
    p2 = cache_path(m, e2, ['a', 'b'], 4, root=root)
    shutil.copytree(p_other, p2)  # (m, e)'s cache under (m, e2)'s name: same prompts, same max_len
    c = _get(root, m, e2)
    assert c.meta['v'] == 2
    assert c.meta['key'] == cache_key(m, e2, ['a', 'b'], 4)
    assert other.meta['key'] != c.meta['key']


def test_corrupt_cache_is_built_again(tmp_path, fake_build):
    root, m, e = tmp_path / 'caches', _ckpt(tmp_path / 'merged'), _ckpt(tmp_path / 'expert')
    _get(root, m, e)
    p = cache_path(m, e, ['a', 'b'], 4, root=root)
    truncate(TENSORS)(p)
    with pytest.warns(UserWarning, match=f'{p / TENSORS}: corrupt or incomplete'):
        c = _get(root, m, e)
    assert c.meta['v'] == 2
    assert whole(HiddenCache.load(p, device='cpu'))
    assert temporaries(root) == []


@pytest.mark.parametrize('what', ['module', 'cache'])
def test_racing_first_saves_of_one_path(tmp_path, monkeypatch, what):
    "Writers that all found no folder put theirs in place at once (the race core._swap leaves): none fails, one stays."
    errors, orig = [], core._swap

    def racing_swap(tmp, final):
        if not final.exists():  # core._swap's first branch, with every writer held until all have looked
            gate.wait()
            os.replace(tmp, final)
            return
        orig(tmp, final)

    monkeypatch.setattr(core, '_swap', racing_swap)
    for k in range(3):
        p, start, gate = tmp_path / f'x{k}', threading.Barrier(4), threading.Barrier(4, timeout=10)

        def save(v):
            start.wait()
            try:
                save_surgery(filled(float(v)), p, seed=v) if what == 'module' else versioned_cache(v).save(p)
            except Exception as e:
                errors.append(repr(e))

        ts = [threading.Thread(target=save, args=(v,)) for v in range(1, 5)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if what == 'module':
            m = load_surgery(p)
            assert same_module(m, float(m.meta['seed']))
        else:
            assert whole(HiddenCache.load(p, device='cpu'))
    assert errors == []
    assert temporaries(tmp_path) == []


# ---------------------------------------------------------------------------------------------------------
# Issue 29: a module folder comes from anywhere (a hub repo, a colleague's disk). Each case is an attack on the
# loader: sizes that would make it allocate without bound, files that are not files, config fields that are not
# what the card and the loader expect.


@pytest.fixture
def no_big_tensors(monkeypatch):
    "torch's factories refuse (and record) any tensor of more than a million elements off the meta device."
    import math

    big = []

    def spy(fn):
        def f(*size, **kw):
            shape = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else size
            n = math.prod(shape) if all(isinstance(s, int) for s in shape) else 0
            device = torch.device(kw.get('device') or torch.get_default_device())
            if n > 10**6 and device.type != 'meta':
                big.append(tuple(shape))
                raise MemoryError(f'the test refuses to allocate a {tuple(shape)} tensor')
            return fn(*size, **kw)

        return f

    for name in ('zeros', 'empty', 'randn', 'rand', 'ones'):
        monkeypatch.setattr(torch, name, spy(getattr(torch, name)))
    return big


HUGE = [  # (case, config sizes claimed beside the weights of a PositionSurgery(8, 2, 4), text of the error)
    ('max_len=10**7 (the filer: 1.2 GB at H=32)', dict(hidden_size=32, max_len=10**7), 'max_len=10000000, more than'),
    ('max_len=10**9 (the filer: 128 GB)', dict(hidden_size=32, max_len=10**9), 'max_len=1000000000, more than'),
    ('each size allowed, 256 GiB together', dict(hidden_size=2**16, max_len=2**20), 'more than MAX_MODULE_BYTES'),
    ('4 GB allowed, but not what the file holds', dict(hidden_size=1024, max_len=10**6), 'do not match the config'),
    ('a token table of 10**9 rows', dict(kind='token', vocab_size=10**9), 'vocab_size=1000000000, more than'),
]


@pytest.mark.parametrize('case,sizes,text', HUGE, ids=[c[0] for c in HUGE])
def test_a_small_folder_claiming_a_huge_module_allocates_nothing(tmp_path, no_big_tensors, case, sizes, text):
    "A 1 KB folder whose config claims a huge module: refused before anything is allocated (torch's factories spied)."
    p = save_surgery(filled(1.0), tmp_path / 'm')
    assert sum(f.stat().st_size for f in p.iterdir()) < 4096
    _put(p, {**_cfg(p), **sizes})
    with pytest.raises(ValueError) as e:
        load_surgery(p)
    assert str(p) in str(e.value), str(e.value)
    assert text in str(e.value), str(e.value)
    assert no_big_tensors == []


def test_an_exported_checkpoints_module_is_read_the_same_way(tmp_path, no_big_tensors):
    "The modelling file of an export reads its darts_surgery/ with the same checks (deploy._built_in_module)."
    from darts_nb.deploy import _built_in_module

    p = save_surgery(filled(1.0), tmp_path / 'export' / 'darts_surgery')
    _put(p, {**_cfg(p), 'hidden_size': 32, 'max_len': 10**6})
    with pytest.raises(ValueError, match='do not match the config'):
        _built_in_module(str(tmp_path / 'export'), {})
    assert no_big_tensors == []
    _put(p, {**_cfg(p), 'kind': ['position']})
    with pytest.raises(ValueError, match=r"kind=\['position'\], expected one of"):
        _built_in_module(str(tmp_path / 'export'), {})


def _header(entries, data=b''):
    "A safetensors file with this header (JSON) and data."
    h = json.dumps(entries).encode()
    return len(h).to_bytes(8, 'little') + h + data


FORGED = [  # (case, weights file content, text of the error)
    ('a header length of 10**12', (10**12).to_bytes(8, 'little') + b'{}', 'a header of 1000000000000 bytes'),
    (
        'a header that matches the config, no data',
        _header({'b': {'dtype': 'F32', 'shape': [4, 8], 'data_offsets': [0, 128]}}),
        'do not match',
    ),
    (
        'shapes of the config, data offsets of 32 GB',
        _header(
            {
                'b': {'dtype': 'F32', 'shape': [4, 8], 'data_offsets': [0, 2**35]},
                'down.weight': {'dtype': 'F32', 'shape': [2, 8], 'data_offsets': [2**35, 2**35 + 64]},
                'up.weight': {'dtype': 'F32', 'shape': [8, 2], 'data_offsets': [2**35 + 64, 2**35 + 128]},
            }
        ),
        'data offsets [0, 34359738368] do not follow',
    ),
    (
        'integer tensors',
        _header(
            {
                'b': {'dtype': 'I64', 'shape': [4, 8], 'data_offsets': [0, 256]},
                'down.weight': {'dtype': 'F32', 'shape': [2, 8], 'data_offsets': [256, 320]},
                'up.weight': {'dtype': 'F32', 'shape': [8, 2], 'data_offsets': [320, 384]},
            },
            b'\0' * 384,
        ),
        "b: dtype 'I64', expected one of",
    ),
    ('a header that is a list', _header([1, 2]), 'not a table of tensors'),
    ('a shape of strings', _header({'b': {'dtype': 'F32', 'shape': ['4'], 'data_offsets': [0, 4]}}), 'not a table'),
]


@pytest.mark.parametrize('case,content,text', FORGED, ids=[c[0] for c in FORGED])
def test_forged_weights_headers_are_refused_before_the_data_is_read(tmp_path, no_big_tensors, case, content, text):
    p = save_surgery(filled(1.0), tmp_path / 'm')
    (p / WEIGHTS).write_bytes(content)
    with pytest.raises(ValueError) as e:
        load_surgery(p)
    assert str(p / WEIGHTS) in str(e.value), str(e.value)
    assert text in str(e.value), str(e.value)
    assert no_big_tensors == []


def test_a_config_over_its_bound_is_not_read(tmp_path):
    p = save_surgery(filled(1.0), tmp_path / 'm')
    _put(p, {**_cfg(p), 'notes': 'x' * (1 << 21)})
    with pytest.raises(ValueError, match='more than the 1048576 it may have') as e:
        read_surgery_config(p)
    assert str(p / CONFIG) in str(e.value)


NOT_FILES = [  # (case, the file, what to put at its name, error text)
    ('weights: a link to /dev/zero', WEIGHTS, 'zero', 'got a character device'),
    ('weights: a FIFO', WEIGHTS, 'fifo', 'got a FIFO'),
    ('config: a FIFO', CONFIG, 'fifo', 'got a FIFO'),
    ('config: a link to /dev/zero', CONFIG, 'zero', 'got a character device'),
]

LOAD_IN_CHILD = textwrap.dedent('''
    import json, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # an endless read fails here, not on the machine
    from darts_nb.surgery import load_surgery
    for p in sys.argv[1:]:
        try:
            load_surgery(p)
            print(json.dumps(['loaded', '']), flush=True)
        except BaseException as e:
            print(json.dumps([type(e).__name__, str(e)]), flush=True)
''')


def test_files_that_are_not_regular_files_are_refused_not_read(tmp_path):
    "A FIFO would hang the loader, /dev/zero be read without end: each is refused at once (one child process)."
    folders = []
    for i, (case, name, what, text) in enumerate(NOT_FILES):
        p = save_surgery(filled(1.0), tmp_path / f'm{i}')
        (p / name).unlink()
        os.symlink('/dev/zero', p / name) if what == 'zero' else os.mkfifo(p / name)
        folders.append(str(p))
    try:  # the timeout only stops a hung child (the bug); nothing here measures time
        r = subprocess.run([sys.executable, '-c', LOAD_IN_CHILD, *folders], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as e:
        done = len((e.stdout or b'').splitlines())
        pytest.fail(f'the loader hung: {NOT_FILES[done][0]} (case {done + 1} of {len(folders)})')
    got = [json.loads(line) for line in r.stdout.strip().splitlines()]
    assert len(got) == len(NOT_FILES), r.stderr[-2000:]
    for (case, name, what, text), p, (exc, msg) in zip(NOT_FILES, folders, got):
        assert exc == 'ValueError', (case, exc, msg)
        assert f'{p}/{name}' in msg, (case, exc, msg)
        assert text in msg, (case, exc, msg)


def test_a_folder_where_a_file_should_be_is_refused(tmp_path):
    p = save_surgery(filled(1.0), tmp_path / 'm')
    (p / WEIGHTS).unlink()
    (p / WEIGHTS).mkdir()
    with pytest.raises(ValueError, match=f'{p / WEIGHTS}: expected a regular file, got a folder'):
        load_surgery(p)


def set_keys(**kw):
    def f(p):
        _put(p, {**_cfg(p), **kw})

    return f


FIELDS = [  # (case, damage, text): each a clear ValueError naming the file, the field and the value
    ('kind a list (was: TypeError)', set_keys(kind=['position']), "kind=['position'], expected one of"),
    ('kind a dict', set_keys(kind={'a': 1}), "kind={'a': 1}, expected one of"),
    ('scores a list', set_keys(scores=[1, 2]), 'scores: expected a dict of score name'),
    ('scores with a newline', set_keys(scores={'em\nlicense': 1}), 'scores: expected a dict'),
    ('seed a string', set_keys(seed='3'), "seed: expected an integer or None, got '3'"),
    ('seed a bool', set_keys(seed=True), 'seed: expected an integer or None, got True'),
    ('rho_l1 nan', lambda p: (p / CONFIG).write_text(json.dumps({**_cfg(p), 'rho_l1': float('nan')})), 'rho_l1'),
    ('a newline in domain', set_keys(domain='math\nlicense: mit'), 'domain: expected one line of text'),
    ('a newline in merged_model', set_keys(merged_model='m\n---'), 'merged_model: expected one line'),
    ('expert a number', set_keys(expert=7), 'expert: expected one line of text'),
    ('a line separator in loss', set_keys(loss='l1\u2028x: y'), 'loss: expected one line'),
]


@pytest.mark.parametrize('case,damage,text', FIELDS, ids=[c[0] for c in FIELDS])
def test_every_config_field_is_checked(tmp_path, case, damage, text):
    p = save_surgery(filled(1.0), tmp_path / 'm', scores={'em': 0.5}, seed=1, rho_l1=0.3)
    damage(p)
    for read in (load_surgery, read_surgery_config):
        with pytest.raises(ValueError) as e:
            read(p)
        assert str(p / CONFIG) in str(e.value), str(e.value)
        assert text in str(e.value), str(e.value)


SAVE_META = [  # (case, meta given to save_surgery, text)
    ('scores a list (was: AttributeError)', dict(scores=[1, 2]), 'scores: expected a dict'),
    ('a newline in domain', dict(domain='math\nlicense: mit'), 'domain: expected one line'),
    ('seed a float', dict(seed=1.5), 'seed: expected an integer'),
]


@pytest.mark.parametrize('case,meta,text', SAVE_META, ids=[c[0] for c in SAVE_META])
def test_bad_provenance_is_refused_before_anything_is_written(tmp_path, case, meta, text):
    prev = save_surgery(filled(1.0), tmp_path / 'm', seed=1)
    before = snapshot(prev)
    with pytest.raises(ValueError) as e:
        save_surgery(filled(2.0), prev, **meta)
    assert str(prev) in str(e.value)
    assert text in str(e.value)
    assert snapshot(prev) == before
    assert temporaries(tmp_path) == []


def test_save_pretrained_never_writes_a_checkpoint_without_its_module(tmp_path):
    "A module whose provenance cannot be saved stops model.save_pretrained before the checkpoint is written."
    model = tiny_llama(hidden_size=H)
    m = filled(0.5)
    m.meta = {'scores': [0.1, 0.2]}  # not a dict
    attach_surgery(model, m)
    with pytest.raises(ValueError, match='scores: expected a dict'):
        model.save_pretrained(tmp_path / 'ckpt')
    assert not (tmp_path / 'ckpt').exists() or os.listdir(tmp_path / 'ckpt') == []
    (tmp_path / 'ckpt2' / 'darts_surgery').mkdir(parents=True)
    (tmp_path / 'ckpt2' / 'darts_surgery' / 'notes.txt').write_text('mine')
    m.meta = {'scores': {'em': 0.1}}
    with pytest.raises(FileExistsError, match='notes.txt'):  # the module's folder is someone's: nothing written
        model.save_pretrained(tmp_path / 'ckpt2')
    assert sorted(os.listdir(tmp_path / 'ckpt2')) == ['darts_surgery']
    with pytest.warns(UserWarning, match='saved beside it'):
        model.save_pretrained(tmp_path / 'ckpt3')
    assert load_surgery(tmp_path / 'ckpt3' / 'darts_surgery').meta['scores'] == {'em': 0.1}


def test_a_module_saved_before_issue_29_still_loads_and_is_replaced(tmp_path):
    "A folder written before the card's hash was recorded: it loads, and a save replaces it (its card is its own)."
    p = save_surgery(filled(1.0), tmp_path / 'm', domain='math')
    c = _cfg(p)
    del c['card_sha256']
    _put(p, c)
    assert same_module(load_surgery(p), 1.0)
    save_surgery(filled(2.0), p, domain='math')
    assert same_module(load_surgery(p), 2.0)
    assert sorted(os.listdir(p)) == sorted([CONFIG, WEIGHTS, CARD])
