"""The training loop's overhead: `darts_nb.train.train_surgery` against a bare loop doing the same maths on the same
tensors, at a small shape and at a Llama-2-7B-like one.

The bare loop is the maths and nothing else: the same cache, the same batches (`train.batch_order`, same seed), the
float32 upcast, positions from the mask, the same DARTS module (same initialisation), the same loss function
(`losses.get_loss`), the same Adam; it keeps each step's loss as a tensor and reads them once at the end. Both run
in one process, interleaved (the order alternates every repeat, so drift in the machine's load hits both), each
timed whole (setup included: the loop's input checks, the bare loop's batch order); the ratio is
bare time / loop time (the loop's speed relative to the bare one, 1.0 = no overhead), and the median over the
repeats is printed with its range (target at least 0.8x at the small shape), then the same median ratio of the
process's CPU time (with one thread on a CPU, the work each loop did, less disturbed by other processes). The two
loss histories must agree exactly (printed as max |diff|). Never asserted.

Shapes (the cache is synthetic: left-padded prompts, bf16 hidden states, float32 entropies, token ids, as
`cache.build_cache` stores them; 50 prompts, the paper's calibration count):
  small     hidden 256, 128 positions, batch 8, rank 16, 200 steps
  llama7b   hidden 4096, 512 positions, batch 8, rank 16, 8 steps by default (a CPU step takes about a second there,
            so the one-time input checks weigh more than in a 500-step training)
`--inline-loss` makes the bare loop write EWL1 out instead of calling the loss function, so the ratio also counts
the loss function's own input checks (the mask selects a position, the entropies are finite and >= 0).
`--tiny` (hidden 32, 16 positions, 5 steps, 3 repeats) is the smoke test's size. Threads default to 1: on a
shared 2-core machine two threads make single runs vary by several times.

    python bench/bench_loop.py [--shape small|llama7b|both] [--steps N] [--repeats R] [--threads T] [--device D]
                              [--inline-loss] [--tiny]
"""

from __future__ import annotations
import argparse
import functools
import os
import statistics
import time
import torch

SHAPES = {  # hidden, positions, prompts, batch, rank, steps, repeats
    'small': dict(hidden=256, positions=128, prompts=50, batch=8, rank=16, steps=200, repeats=9),
    'llama7b': dict(hidden=4096, positions=512, prompts=50, batch=8, rank=16, steps=8, repeats=3),
    'tiny': dict(hidden=32, positions=16, prompts=12, batch=4, rank=4, steps=5, repeats=3),
}
LOSS, LR, SEED = 'ewl1', 1e-3, 0


def synthetic_cache(hidden, positions, prompts, device='cpu', seed=0):
    "A left-padded cache as build_cache stores it: bf16 states, float32 entropies, zeros at pads, token ids."
    from darts_nb.cache import HiddenCache
    from darts_nb.core import positions_from_mask

    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(positions // 4, positions + 1, (prompts,), generator=g)
    mask = torch.arange(positions)[None] >= (positions - lens)[:, None]
    hm = (torch.randn(prompts, positions, hidden, generator=g) * mask[..., None]).bfloat16()
    offset = 0.1 * torch.randn(positions, hidden, generator=g)
    hk = (hm.float() + offset[positions_from_mask(mask)] * mask[..., None]).bfloat16()
    ent = torch.rand(prompts, positions, generator=g) * mask
    ids = torch.randint(3, 32000, (prompts, positions), generator=g) * mask
    return HiddenCache(hm, hk, ent, mask, {}, ids=ids).to(device)


def fresh_module(hidden, rank, device):
    "The DARTS (position) module both loops train, initialised identically."
    from darts_nb.surgery import make_surgery

    torch.manual_seed(0)
    return make_surgery('darts', hidden, rank=rank, max_len=512).to(device)


def inline_ewl1(pred, target, entropy, mask):
    "EWL1 (Eq. 6) written out, without the loss function's input checks (`--inline-loss`)."
    e = entropy[mask]
    return ((pred[mask] - target[mask]).abs().mean(-1) * (e / e.mean())).mean()


def bare_loop(module, cache, steps, batch_size, inline=False):
    "The maths of train_surgery and nothing else; returns the loss of each step."
    from darts_nb.core import positions_from_mask
    from darts_nb.losses import get_loss
    from darts_nb.train import batch_order

    loss = inline_ewl1 if inline else get_loss(LOSS)
    dev = next(module.parameters()).device
    opt = torch.optim.Adam(module.parameters(), lr=LR, betas=(0.9, 0.999))
    module.train()
    values = []
    for idx in batch_order(len(cache), batch_size, steps, SEED):
        idx = idx.to(cache.device)
        m = cache.mask[idx].to(dev)
        hm = cache.merged[idx].to(dev, torch.float32)
        hk = cache.target[idx].to(dev, torch.float32)
        e = cache.entropy[idx].to(dev, torch.float32)
        value = loss(module(hm, positions_from_mask(m)), hk, e, m)
        opt.zero_grad(set_to_none=True)
        value.backward()
        opt.step()
        values.append(value.detach())
    module.eval()
    return torch.stack(values).tolist()


def the_loop(module, cache, steps, batch_size):
    "darts_nb's training loop on the same inputs (no progress bar: the bare loop has none)."
    from darts_nb.train import train_surgery, TrainSettings

    settings = TrainSettings(loss=LOSS, iters=steps, lr=LR, batch_size=batch_size, seed=SEED)
    return train_surgery(module, cache, settings, progress=False)


def sync(device):
    if torch.device(device).type == 'cuda':
        torch.cuda.synchronize()


def timed(fn, shape, cache, device, steps):
    "(wall seconds, CPU seconds of this process, loss history) of one whole training by `fn` on a fresh module."
    mod = fresh_module(shape['hidden'], shape['rank'], device)
    sync(device)
    t0, c0 = time.perf_counter(), time.process_time()
    hist = fn(mod, cache, steps, shape['batch'])
    sync(device)
    return time.perf_counter() - t0, time.process_time() - c0, hist


def bench_shape(name, device, steps=None, repeats=None, inline=False):
    "Interleaved timings of both loops at shape `name`: a dict of times, ratios and the largest loss difference."
    shape = SHAPES[name]
    steps = steps or shape['steps']
    repeats = repeats or shape['repeats']
    cache = synthetic_cache(shape['hidden'], shape['positions'], shape['prompts'], device=device)
    loops = {'loop': the_loop, 'bare': functools.partial(bare_loop, inline=inline)}
    for fn in loops.values():  # warm-up: allocator, kernels, first-call imports
        timed(fn, shape, cache, device, min(steps, 3))
    times, cpu, hists = {k: [] for k in loops}, {k: [] for k in loops}, {}
    for r in range(repeats):
        for k in ('loop', 'bare') if r % 2 == 0 else ('bare', 'loop'):
            dt, ct, hists[k] = timed(loops[k], shape, cache, device, steps)
            times[k].append(dt)
            cpu[k].append(ct)
    ratios = [b / t for b, t in zip(times['bare'], times['loop'])]
    cpu_ratios = [b / t for b, t in zip(cpu['bare'], cpu['loop'])]
    diff = max(abs(a - b) for a, b in zip(hists['loop'], hists['bare']))
    return dict(shape=shape, steps=steps, repeats=repeats, times=times, ratios=ratios, cpu_ratios=cpu_ratios, diff=diff)


def report(name, res):
    "One line: the shape, the median step times, the median ratio and its range, the CPU-time ratio."
    s, r = res['shape'], sorted(res['ratios'])
    # CPU time of the process: on a CPU with one thread, what each loop computed, whatever else ran beside it
    c = statistics.median(res['cpu_ratios'])
    per = {k: statistics.median(v) / res['steps'] * 1e3 for k, v in res['times'].items()}
    return (
        f"{name:8s} hidden {s['hidden']}, {s['positions']} positions, batch {s['batch']}, rank {s['rank']}, "
        f"{res['steps']} steps: loop {per['loop']:.2f} ms/step | bare {per['bare']:.2f} ms/step | "
        f"loop ratio {statistics.median(r):.3f}x (median of {res['repeats']}, range {r[0]:.3f}-{r[-1]:.3f}; "
        f"target >= 0.8 at small) | CPU-time ratio {c:.3f}x | max |loss diff| {res['diff']:.1e}"
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--shape', default='both', choices=['small', 'llama7b', 'both'])
    ap.add_argument('--tiny', action='store_true', help='the smoke test: a tiny shape, a few steps')
    ap.add_argument('--steps', type=int, default=None, help="steps per training (default: the shape's)")
    ap.add_argument('--repeats', type=int, default=None, help="timed pairs (default: the shape's)")
    ap.add_argument('--threads', type=int, default=1, help='torch threads (0: torch default)')
    ap.add_argument('--device', default=None)
    ap.add_argument(
        '--inline-loss', action='store_true', help="the bare loop writes EWL1 out, without the loss function's checks"
    )
    a = ap.parse_args(argv)
    os.environ.setdefault('HF_HUB_OFFLINE', '1')
    from darts_nb.core import default_device

    if a.threads:
        torch.set_num_threads(a.threads)
    dev = default_device(a.device)
    names = ['tiny'] if a.tiny else ['small', 'llama7b'] if a.shape == 'both' else [a.shape]
    bare = 'written out' if a.inline_loss else 'darts_nb.losses'
    print(f"device {dev}, torch {torch.__version__}, threads {torch.get_num_threads()}, loss {LOSS} (bare: {bare})")
    out = {}
    for name in names:
        out[name] = bench_shape(name, dev, steps=a.steps, repeats=a.repeats, inline=a.inline_loss)
        print(report(name, out[name]), flush=True)
    return out


if __name__ == '__main__':
    main()
