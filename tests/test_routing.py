"""The router of a correction (`routing`, issue 37): adversarial inputs on the ci zoo.

A router folder with a missing, damaged, tampered or foreign file is refused with an error naming the file; a router
naming domains the correction lacks is refused when the modules are attached; a model of another hidden size is a
clear error; an empty prompt list is no request; a save that fails leaves nothing behind; a router folder is never
taken for a module folder."""

import hashlib
import json
import shutil
import pytest
import torch
from conftest import half_written
from darts_nb.core import tiny_llama
from darts_nb.correct import attach_corrections
from darts_nb.deploy import add_surgery, active_surgery, set_surgery
from darts_nb.domains import load_split
from darts_nb.routing import (
    ROUTER_CONFIG,
    ROUTER_DIR,
    ROUTER_FILES,
    ROUTER_WEIGHTS,
    Router,
    attach_router,
    fit_router,
    load_router,
    mixed_traffic_scores,
    prompt_features,
    route,
    routed_generate,
    router_from_features,
    router_of,
    save_router,
)
from darts_nb.surgery import make_surgery
from darts_nb.surgery_files import CONFIG, save_surgery


def prompts(domain: str, n: int, start: int = 0) -> list[str]:
    "`n` eval prompts of a built-in domain."
    return [it['prompt'] for it in load_split(domain, 'eval')[start : start + n]]


@pytest.fixture(scope='module')
def router(code_model):
    "A router of the maths and code domains, fitted on the ci zoo's code expert (a stand-in for a merge)."
    model, tok = code_model
    return fit_router(model, tok, {'math': prompts('math', 6), 'code': prompts('code', 6)})


@pytest.fixture
def out(router, code_model, tmp_path):
    "A correction's output folder: a module per domain (hidden size 64) and the router beside them."
    model, _ = code_model
    for d in router.domains:
        save_surgery(make_surgery('position', model.config.hidden_size, rank=2, max_len=512), tmp_path / d, domain=d)
    save_router(router, tmp_path / ROUTER_DIR)
    return tmp_path


@pytest.fixture
def served(code_model, out):
    "The model with the correction attached (its modules and router); everything detached afterwards."
    model, tok = code_model
    attach_corrections(model, out)
    yield model, tok
    set_surgery(model, None)
    model.__dict__.pop('_darts_named', None)
    model.__dict__.pop('_darts_router', None)


def test_the_router_folder_is_no_module(router, out, code_model):
    "attach_corrections registers the module folders only, and attaches the router from router/."
    model, _ = code_model
    assert CONFIG not in ROUTER_FILES and sorted(p.name for p in (out / ROUTER_DIR).iterdir()) == sorted(ROUTER_FILES)
    try:
        assert sorted(attach_corrections(model, out)) == ['code', 'math']
        assert router_of(model).domains == router.domains
    finally:
        model.__dict__.pop('_darts_named', None)
        model.__dict__.pop('_darts_router', None)


def test_save_load_round_trip(router, tmp_path):
    "Every tensor and field comes back exactly."
    back = load_router(save_router(router, tmp_path / 'r'))
    for k in ('centroids', 'shift', 'scale'):
        assert torch.equal(getattr(back, k), getattr(router, k))
    assert (back.domains, back.threshold, back.radius, back.max_len) == (
        router.domains,
        router.threshold,
        router.radius,
        router.max_len,
    )
    assert back.meta == router.meta


def test_missing_tensor_file(out):
    (out / ROUTER_DIR / ROUTER_WEIGHTS).unlink()
    with pytest.raises(
        FileNotFoundError, match=rf'{ROUTER_WEIGHTS}: missing .*expected {ROUTER_CONFIG} \+ {ROUTER_WEIGHTS}'
    ):
        load_router(out / ROUTER_DIR)


def test_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match='no router here'):
        load_router(tmp_path / 'nowhere')


def test_tampered_tensor_bytes(out):
    "One changed byte: the hash the config records no longer matches, and the file is named."
    w = out / ROUTER_DIR / ROUTER_WEIGHTS
    data = bytearray(w.read_bytes())
    data[-1] ^= 0x01
    w.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf'{ROUTER_WEIGHTS}: SHA-256 .* the file is damaged or was changed'):
        load_router(out / ROUTER_DIR)


def retensor(out, tensors: dict) -> None:
    "Rewrite the router's tensors as `tensors`, with the config's hash updated: a consistent but wrong folder."
    from safetensors.torch import save

    data = save(tensors)
    (out / ROUTER_DIR / ROUTER_WEIGHTS).write_bytes(data)
    cfg = json.loads((out / ROUTER_DIR / ROUTER_CONFIG).read_text())
    cfg['weights_sha256'] = hashlib.sha256(data).hexdigest()
    (out / ROUTER_DIR / ROUTER_CONFIG).write_text(json.dumps(cfg))


def test_tensor_left_out(router, out):
    "A tensor missing from a file whose hash was recorded again: the tensors expected are named."
    retensor(out, {'centroids': router.centroids, 'shift': router.shift})
    with pytest.raises(ValueError, match=rf"{ROUTER_WEIGHTS}: tensors .*; expected .*'scale'"):
        load_router(out / ROUTER_DIR)


def test_tensor_of_another_shape_or_not_finite(router, out):
    retensor(out, {'centroids': router.centroids[:, :8].contiguous(), 'shift': router.shift, 'scale': router.scale})
    with pytest.raises(ValueError, match=rf'{ROUTER_WEIGHTS}: tensors .*expected'):
        load_router(out / ROUTER_DIR)
    bad = router.scale.clone()
    bad[0] = float('nan')
    retensor(out, {'centroids': router.centroids, 'shift': router.shift, 'scale': bad})
    with pytest.raises(ValueError, match=rf'{ROUTER_CONFIG}: scale: expected finite values'):
        load_router(out / ROUTER_DIR)


def test_corrupt_and_foreign_configs(out):
    c = out / ROUTER_DIR / ROUTER_CONFIG
    c.write_text('{"format": "darts_router", ')
    with pytest.raises(ValueError, match=rf'{ROUTER_CONFIG}: corrupt JSON'):
        load_router(out / ROUTER_DIR)
    shutil.copy(out / 'math' / CONFIG, c)  # a module's config under the router's name
    with pytest.raises(ValueError, match=r"not a router config \(format None, not 'darts_router'\)"):
        load_router(out / ROUTER_DIR)
    c.write_text(json.dumps({'format': 'darts_router', 'format_version': 1, 'domains': 'math'}))
    with pytest.raises(ValueError, match=r"fields \['domains', 'hidden_size'"):
        load_router(out / ROUTER_DIR)
    c.write_text(json.dumps({'format': 'darts_router', 'format_version': 2}))
    with pytest.raises(ValueError, match='format_version 2; this darts_nb reads version 1'):
        load_router(out / ROUTER_DIR)


def test_config_naming_domains_the_out_dir_lacks(router, out, code_model):
    "A router that routes to a domain with no module folder is refused when the correction is attached."
    model, _ = code_model
    cfg = json.loads((out / ROUTER_DIR / ROUTER_CONFIG).read_text())
    cfg['domains'] = ['math', 'law']
    (out / ROUTER_DIR / ROUTER_CONFIG).write_text(json.dumps(cfg))
    assert load_router(out / ROUTER_DIR).domains == ('math', 'law')  # a router in itself
    try:
        with pytest.raises(ValueError, match=r"router: routes to \['law'\], which the model has no module for"):
            attach_corrections(model, out)
    finally:
        model.__dict__.pop('_darts_named', None)


def test_another_hidden_size(router, out, code_model):
    "A model of another hidden size: a clear error from every entry point, before any feature is computed."
    other, tok = tiny_llama(hidden_size=32, vocab_size=512), code_model[1]
    said = 'model: hidden size 32, but the router was fitted on a model of hidden size 64'
    with pytest.raises(ValueError, match=said):
        route(router, other, tok, ['x = 1'])
    with pytest.raises(ValueError, match=said):
        attach_router(other, router)
    with pytest.raises(ValueError, match=r'features: expected features of one width H, got widths \[32, 64\]'):
        router_from_features({'math': torch.zeros(3, 64), 'code': torch.zeros(3, 32)})
    add_surgery(other, 'math', make_surgery('position', 32, rank=2, max_len=16))
    add_surgery(other, 'code', make_surgery('position', 32, rank=2, max_len=16))
    with pytest.raises(ValueError, match=said):
        routed_generate(other, tok, ['x = 1'], router=router)
    with pytest.raises(ValueError, match="hidden_size=64 but the model's hidden size is 32"):
        attach_corrections(other, out)  # the modules of hidden size 64 are refused before the router


def test_empty_prompt_lists(router, served):
    model, tok = served
    assert route(router, model, tok, []) == []
    assert routed_generate(model, tok, []) == []
    assert prompt_features(model, tok, []).shape == (0, 64)
    with pytest.raises(ValueError, match=r"prompts_by_domain\['math'\]: expected at least 2 prompts, got 0"):
        fit_router(model, tok, {'math': [], 'code': prompts('code', 3)})
    with pytest.raises(ValueError, match=r"held_out\['code'\]: expected at least 1 prompts, got 0"):
        fit_router(
            model, tok, {'math': prompts('math', 3), 'code': prompts('code', 3)}, held_out={'math': ['a'], 'code': []}
        )
    with pytest.raises(ValueError, match='prompts: expected a list of prompt strings, got str'):
        route(router, model, tok, 'one prompt')
    with pytest.raises(ValueError, match='prompts: expected a list of prompt strings, got a int at 1'):
        routed_generate(model, tok, ['a', 3])


def test_routed_generate_restores_and_keeps_order(served, monkeypatch):
    "A mixed batch comes back in its order; the module attached before the call is attached after it, even on error."
    from darts_nb.zoo import generate_completions

    model, tok = served
    batch = prompts('math', 4, start=30) + prompts('code', 4, start=30)
    batch = [batch[i] for i in (0, 4, 1, 5, 2, 6, 3, 7)]  # interleaved
    picks = route(router_of(model), model, tok, batch)
    assert {'math', 'code'} <= set(picks), picks
    set_surgery(model, 'code')
    got = routed_generate(model, tok, batch, max_new_tokens=8)
    assert active_surgery(model) == 'code' and len(got) == len(batch)
    for name in set(picks):  # each group as its module serves it alone, back in the batch's order
        idx = [i for i, p in enumerate(picks) if p == name]
        set_surgery(model, name)
        assert [got[i] for i in idx] == generate_completions(model, tok, [batch[i] for i in idx], max_new_tokens=8)
    set_surgery(model, 'math')
    with pytest.raises(ValueError, match='max_new_tokens: expected an integer >= 1, got 0'):
        routed_generate(model, tok, batch, max_new_tokens=0)
    calls = []

    def dies_second(*a, **k):  # generation fails on the second group
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError('out of memory')
        return generate_completions(*a, **k)

    monkeypatch.setattr('darts_nb.zoo.generate_completions', dies_second)
    with pytest.raises(RuntimeError, match='out of memory'):
        routed_generate(model, tok, batch, max_new_tokens=8)
    assert len(calls) == 2 and active_surgery(model) == 'math'


def test_no_router_anywhere(code_model):
    model, tok = code_model
    with pytest.raises(ValueError, match='router: expected a Router or its folder, or a model with one attached'):
        routed_generate(model, tok, ['x'])


def test_mixed_traffic_needs_built_in_domains(code_model):
    "A router of the user's own domains has no built-in eval prompts to be measured on."
    model, tok = code_model
    feats = {'law': torch.randn(4, 64), 'med': torch.randn(4, 64) + 3}
    own = router_from_features(feats)
    for d in own.domains:
        add_surgery(model, d, make_surgery('position', 64, rank=2, max_len=16))
    try:
        with pytest.raises(ValueError, match=r"router: expected a router of built-in domains .* got \['law', 'med'\]"):
            mixed_traffic_scores(model, tok, own, limit=2)
    finally:
        model.__dict__.pop('_darts_named', None)


def test_a_failed_save_leaves_nothing(router, tmp_path, monkeypatch):
    "A save that dies while writing leaves no folder and no temporary; an existing router is kept whole."
    import darts_nb.core

    def boom(*a, **k):
        raise OSError('disk died')

    save_router(router, tmp_path / 'r')
    before = (tmp_path / 'r' / ROUTER_WEIGHTS).read_bytes()
    monkeypatch.setattr(darts_nb.core.Path, 'write_bytes', boom)
    with pytest.raises(OSError, match='disk died'):
        save_router(router, tmp_path / 'r')
    with pytest.raises(OSError, match='disk died'):
        save_router(router, tmp_path / 'new')
    monkeypatch.undo()
    assert not (tmp_path / 'new').exists() and half_written(tmp_path) == []
    assert (tmp_path / 'r' / ROUTER_WEIGHTS).read_bytes() == before


def test_save_never_replaces_foreign_files(router, out):
    "A module folder (or any folder with other files) is never replaced by a router."
    with pytest.raises(FileExistsError, match="besides a router's own files"):
        save_router(router, out / 'math')
    assert (out / 'math' / CONFIG).exists()


def test_bad_router_values():
    feats = {'math': torch.randn(3, 4), 'code': torch.randn(3, 4) + 3}
    r = router_from_features(feats)
    with pytest.raises(ValueError, match='threshold: expected a number in'):
        Router(r.domains, centroids=r.centroids, shift=r.shift, scale=r.scale, threshold=1.5, radius=r.radius)
    with pytest.raises(
        ValueError, match="domains: expected two or more distinct domain names, got \\('math', 'math'\\)"
    ):
        Router(('math', 'math'), centroids=r.centroids, shift=r.shift, scale=r.scale, threshold=0.1, radius=1.0)
    with pytest.raises(ValueError, match=r"features\['code'\]: expected N x H features with N >= 2, got \(1, 4\)"):
        router_from_features({'math': feats['math'], 'code': feats['code'][:1]})
    with pytest.raises(TypeError, match="'precison' is not an option of fit_router; did you mean precision"):
        router_from_features(feats, precison=0.9)
