"Bad-input table and end-to-end checks for darts_nb.bias (fast)."

from types import SimpleNamespace
import numpy as np
import pytest
import torch
from darts_nb.bias import token_bias, align_positions, bias_by_position, bias_trend, bias_heatmap, synthetic_cache

C = synthetic_cache(n=6, t=16, h=8, base=0.1, slope=0.02, seed=1)


@pytest.mark.parametrize(
    'call, exc, words',
    [
        (lambda: token_bias(SimpleNamespace(merged=C.merged, mask=C.mask)), TypeError, "'target'"),
        (
            lambda: token_bias(SimpleNamespace(merged=C.merged, target=C.target[:, :3], mask=C.mask)),
            ValueError,
            'N x T x H',
        ),
        (
            lambda: token_bias(SimpleNamespace(merged=C.merged, target=C.target, mask=C.mask[:2])),
            ValueError,
            'cache.mask',
        ),
        (lambda: align_positions(np.zeros(3)), ValueError, 'N x T'),
        (lambda: bias_trend([1]), TypeError, 'dict'),
        (lambda: bias_trend({}), TypeError, 'dict'),
        (lambda: bias_trend({'code': token_bias(C)[:, -2:]}), ValueError, 'need at least 4'),
        (lambda: bias_heatmap({'code': token_bias(C)}, after={'math': token_bias(C)}), ValueError, 'same as biases'),
    ],
)
def test_bad_input(call, exc, words):
    with pytest.raises(exc) as e:
        call()
    assert words in str(e.value)


def test_left_padding_positions():
    "The bias of a left-padded row equals the bias of the same sample without padding, position by position."
    c = synthetic_cache(n=3, t=10, h=4, base=0.1, slope=0.1, seed=2)
    b = token_bias(c)
    for i in range(3):
        m = c.mask[i]
        one = SimpleNamespace(merged=c.merged[i : i + 1, m], target=c.target[i : i + 1, m], mask=m[m][None])
        assert torch.allclose(token_bias(one)[0], b[i, m])
    al = align_positions(b)
    assert np.allclose(al[0, : int(c.mask[0].sum())], b[0, c.mask[0]].numpy())
    assert not np.isnan(al[:, 0]).any()


def test_module_receives_positions():
    seen = {}

    class M(torch.nn.Module):
        def forward(self, h, positions):
            seen['p'] = positions
            return h * 0 + 0  # maps everything to zero

    b = token_bias(C, M(), chunk_size=100)
    assert torch.equal(seen['p'], (C.mask.long().cumsum(-1) - 1).clamp(min=0) * C.mask)
    assert torch.allclose(b[C.mask], C.target.float().abs().mean(-1)[C.mask])


def test_band_and_png(tmp_path):
    b = {'code': token_bias(synthetic_cache(n=20, t=32, slope=0.01, seed=3))}
    pos = bias_by_position(b)
    assert ((pos.lo <= pos['mean']) & (pos['mean'] <= pos.hi)).all()
    assert (pos.n >= 3).all()
    bias_heatmap(b, save=tmp_path / 'x.png')
    assert (tmp_path / 'x.png').stat().st_size > 1000


def test_hidden_cache():
    "A real darts_nb.cache.HiddenCache works as well as the duck-typed synthetic one."
    cache = pytest.importorskip('darts_nb.cache')
    c = cache.HiddenCache(C.merged, C.target, C.entropy, C.mask, {})
    assert torch.equal(torch.isnan(token_bias(c)), ~C.mask)
    assert torch.allclose(token_bias(c), token_bias(C), equal_nan=True)
