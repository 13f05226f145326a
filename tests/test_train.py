"Bad-input table and end-to-end checks for darts_nb.losses, darts_nb.cache and darts_nb.train."

import math
import pytest
import torch
from darts_nb.cache import HiddenCache
from darts_nb.core import positions_from_mask
from darts_nb.losses import l1_loss, ewl1_loss, kl_logits_loss, ce_distill_loss, get_loss, compute_loss, LOSSES
from darts_nb.train import train_surgery, TrainSettings, l1_reduction, argmax_agreement, batch_order
from darts_nb.surgery import make_surgery, SURGERY_KINDS


class Shift(torch.nn.Module):
    "A minimal surgery stand-in: h - b[position]."

    def __init__(self, H, T=64):
        super().__init__()
        self.b = torch.nn.Parameter(torch.zeros(T, H))

    def forward(self, h, positions):
        return h - self.b[positions]


def cache(n=8, T=6, H=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(n, T, dtype=torch.bool)
    mask[::2, :2] = False
    hm = torch.randn(n, T, H, generator=g)
    off = 0.2 * torch.randn(T, H, generator=g)[positions_from_mask(mask)]  # a bias per absolute position
    return HiddenCache(hm.bfloat16(), (hm + off).bfloat16(), torch.rand(n, T, generator=g), mask, {})


def poisoned(value):
    c = cache()
    c.merged[1, 3, 0] = value
    return c


BAD = [  # (description, call, exception, text the message must contain)
    (
        'NaN in cache',
        lambda: train_surgery(Shift(4), poisoned(float('nan')), TrainSettings(loss='l1', iters=2), progress=False),
        ValueError,
        'NaN',
    ),
    (
        'inf in cache',
        lambda: train_surgery(Shift(4), poisoned(float('inf')), TrainSettings(loss='l1', iters=2), progress=False),
        ValueError,
        'inf',
    ),
    (
        'empty calibration set',
        lambda: train_surgery(Shift(4), cache()[[]], TrainSettings(loss='l1', iters=2), progress=False),
        ValueError,
        'empty',
    ),
    (
        'iters 0',
        lambda: train_surgery(Shift(4), cache(), TrainSettings(loss='l1', iters=0), progress=False),
        ValueError,
        'iters',
    ),
    (
        'iters negative',
        lambda: train_surgery(Shift(4), cache(), TrainSettings(loss='l1', iters=-3), progress=False),
        ValueError,
        'iters',
    ),
    (
        'iters float',
        lambda: train_surgery(Shift(4), cache(), TrainSettings(loss='l1', iters=2.5), progress=False),
        ValueError,
        'iters',
    ),
    (
        'unknown loss',
        lambda: train_surgery(Shift(4), cache(), TrainSettings(loss='mse', iters=2), progress=False),
        ValueError,
        "'mse'",
    ),
    (
        'kl without head',
        lambda: train_surgery(Shift(4), cache(), TrainSettings(loss='kl', iters=2), progress=False),
        ValueError,
        'head',
    ),
    (
        'ce without head',
        lambda: train_surgery(Shift(4), cache(), TrainSettings(loss='ce', iters=2), progress=False),
        ValueError,
        'head',
    ),
    (
        'batch_size 0',
        lambda: train_surgery(Shift(4), cache(), TrainSettings(loss='l1', iters=2, batch_size=0), progress=False),
        ValueError,
        'batch_size',
    ),
    (
        'lr 0',
        lambda: train_surgery(Shift(4), cache(), TrainSettings(loss='l1', iters=2, lr=0.0), progress=False),
        ValueError,
        'lr',
    ),
    (
        'not a cache',
        lambda: train_surgery(Shift(4), {'merged': 1}, TrainSettings(loss='l1', iters=2), progress=False),
        TypeError,
        'HiddenCache',
    ),
    (
        'module without parameters',
        lambda: train_surgery(torch.nn.Identity(), cache(), TrainSettings(loss='l1', iters=2), progress=False),
        ValueError,
        'parameters',
    ),
    ('get_loss unknown', lambda: get_loss('nope'), ValueError, 'expected one of'),
    (
        'mask without real position',
        lambda: l1_loss(torch.zeros(1, 3, 2), torch.zeros(1, 3, 2), torch.zeros(1, 3, dtype=torch.bool)),
        ValueError,
        'no',
    ),
    (
        'mask shape',
        lambda: l1_loss(torch.zeros(1, 3, 2), torch.zeros(1, 3, 2), torch.ones(1, 4, dtype=torch.bool)),
        ValueError,
        'mask',
    ),
    (
        'ewl1 negative entropy',
        lambda: ewl1_loss(torch.zeros(1, 3, 2), torch.ones(1, 3, 2), -torch.ones(1, 3), torch.ones(1, 3)),
        ValueError,
        'entropy',
    ),
    (
        'rho on identical states',
        lambda: l1_reduction(None, HiddenCache(cache().merged, cache().merged, cache().entropy, cache().mask)),
        ValueError,
        'identical',
    ),
    (
        'cache shapes',
        lambda: HiddenCache(torch.zeros(2, 3, 4), torch.zeros(2, 3, 5), torch.zeros(2, 3), torch.ones(2, 3)),
        ValueError,
        'shapes',
    ),
    ('split out of range', lambda: cache().split(99), ValueError, 'n:'),
    (
        'unknown kind',
        lambda: make_surgery('wide', 4),
        ValueError,
        f"kind: expected one of {list(SURGERY_KINDS)}, got 'wide'",
    ),
]


@pytest.mark.parametrize('desc,call,exc,text', BAD, ids=[b[0] for b in BAD])
def test_bad_input(desc, call, exc, text):
    with pytest.raises(exc, match=None) as e:
        call()
    assert text in str(e.value), f"{desc}: message {e.value!r} lacks {text!r}"


def test_pad_positions_contribute_nothing():
    torch.manual_seed(0)
    p, t, e = torch.randn(2, 5, 3), torch.randn(2, 5, 3), torch.rand(2, 5)
    m = torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 0, 0]]).bool()
    head = torch.randn(7, 3)
    p2, t2, e2 = p.clone(), t.clone(), e.clone()
    p2[~m], t2[~m], e2[~m] = 1e4, -1e4, 99.0
    for name in LOSSES:
        a = compute_loss(name, p, t, m, entropy=e, head=head)
        b = compute_loss(name, p2, t2, m, entropy=e2, head=head)
        assert torch.equal(a, b), name


def test_training_reduces_a_position_bias_and_is_seeded():
    c = cache(n=16, seed=1)
    calib, held = c.split(12)
    torch.manual_seed(0)
    mod = Shift(4)
    h = train_surgery(mod, calib, TrainSettings(loss='l1', iters=200, lr=1e-2, batch_size=4), progress=False)
    assert h[-1] < h[0]
    assert l1_reduction(mod, held) > 0.5
    runs = [
        train_surgery(
            Shift(4), calib, TrainSettings(loss='ewl1', iters=9, lr=1e-2, batch_size=4, seed=s), progress=False
        )
        for s in (0, 0, 1)
    ]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    assert [b.tolist() for b in batch_order(12, 4, 3, seed=0)] != [b.tolist() for b in batch_order(12, 4, 3, seed=1)]


def test_head_losses_train_and_agreement():
    c = cache(n=8, seed=2)
    head = torch.nn.Linear(4, 9, bias=False)
    assert argmax_agreement(None, HiddenCache(c.target, c.target, c.entropy, c.mask), head) == 1.0
    for loss in ('kl', 'ce'):
        mod = Shift(4)
        h = train_surgery(mod, c, TrainSettings(loss=loss, iters=40, lr=1e-2), head=head, progress=False)
        assert all(math.isfinite(x) for x in h)
        assert head.weight.grad is None
    assert kl_logits_loss(c.target.float(), c.target.float(), c.mask, head) < 1e-6
    assert ce_distill_loss(c.merged.float(), c.target.float(), c.mask, head, chunk_size=5) > 0
