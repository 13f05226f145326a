"""Benchmark of the DARTS training loop and of generation with a surgery module attached.

Measured in one run and printed (never asserted):
  1. training iterations / s of `darts_nb.train.train_surgery` against a bare loop over the same cached
     tensors doing the same math (same batches, float32 upcast, positions from the mask, module forward,
     EWL1, Adam step); target ratio >= 0.8;
  2. greedy-generation tokens / s of the merged model with a DARTS (position) module attached against
     the plain model, the median ratio over adjacent (plain, attached) pairs; target ratio >= 0.95.
Models: the toy zoo's `ta-0.5` merge (made by darts_nb.merge; it is built if missing) plays "merged", its code
expert the target; `--zoo ci` takes the smaller ci zoo instead; falls back to `tiny_llama` models when no zoo
can be built.

    python bench/bench_surgery.py [--zoo toy|ci] [--device cpu|cuda] [--iters 300] [--new-tokens 64] [--repeats 9]
"""

from __future__ import annotations
import argparse
import os
import time
import torch


def models(device, size='toy'):
    "(merged, target, tokenizer, prompts, source): the zoo's ta-0.5 merge and code expert, else tiny_llama stand-ins."
    try:
        from darts_nb.core import darts_home
        from darts_nb.zoo import build_zoo, load_model
        from darts_nb.domains import load_split
        from darts_nb.merge import quick_configs, run_merges

        zoo = build_zoo(size)
        cfg = quick_configs(zoo['base'], {d: p for d, p in zoo.items() if d != 'base'})
        out = darts_home() / 'merges' / size
        run_merges({'ta-0.5': cfg['ta-0.5']}, out)
        m, tok = load_model(out / 'ta-0.5', device=device, dtype=torch.float32)
        t, _ = load_model(zoo['code'], device=device, dtype=torch.float32)
        return m, t, tok, [it['prompt'] for it in load_split('code', 'calib')], f'{size} zoo, ta-0.5 vs code expert'
    except Exception as e:  # pragma: no cover - fallback path
        print(f"{size} zoo unavailable ({type(e).__name__}: {e}); using tiny_llama")
        from darts_nb.core import tiny_llama

        return tiny_llama(seed=0).to(device), tiny_llama(seed=1).to(device), None, None, 'tiny_llama'


def synth_cache(m, t, device, n=50, T=128):
    "A cache of random token ids when there is no tokenizer (tiny_llama fallback)."
    from darts_nb.core import final_hidden, hidden_entropy, lm_head
    from darts_nb.cache import HiddenCache

    ids = torch.randint(3, m.config.vocab_size, (n, T), device=device)
    am = torch.ones_like(ids)
    with torch.no_grad():
        hm, _ = final_hidden(m, ids, am, return_logits=False)
        hk, _ = final_hidden(t, ids, am, return_logits=False)
        e = hidden_entropy(hk, lm_head(t))
    return HiddenCache(hm.bfloat16(), hk.bfloat16(), e, am.bool(), {})


def bare_loop(module, cache, iters, batch_size, lr, seed):
    "The same math as train_surgery (EWL1), with nothing around it."
    from darts_nb.core import positions_from_mask
    from darts_nb.train import batch_order

    dev = next(module.parameters()).device
    opt = torch.optim.Adam(module.parameters(), lr=lr, betas=(0.9, 0.999))
    hist = []
    for idx in batch_order(len(cache), batch_size, iters, seed):
        idx = idx.to(cache.device)
        m = cache.mask[idx].to(dev)
        hm = cache.merged[idx].to(dev, torch.float32)
        hk = cache.target[idx].to(dev, torch.float32)
        e = cache.entropy[idx].to(dev, torch.float32)[m]
        out = module(hm, positions_from_mask(m))
        loss = ((out[m] - hk[m]).abs().mean(-1) * (e / e.mean())).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        hist.append(loss.item())
    return hist


def sync(device):
    if torch.device(device).type == 'cuda':
        torch.cuda.synchronize()


def bench_train(cache, device, iters, repeats, batch_size=8, lr=1e-3):
    from darts_nb.train import train_surgery, TrainSettings
    from darts_nb.surgery import make_surgery

    best = {'train_surgery': 0.0, 'bare loop': 0.0}
    hists = {}
    for r in range(repeats):
        for name in ('train_surgery', 'bare loop') if r % 2 == 0 else ('bare loop', 'train_surgery'):
            torch.manual_seed(0)
            mod = make_surgery('darts', cache.hidden_size, rank=16, max_len=512).to(device)
            sync(device)
            t0 = time.perf_counter()
            h = (
                train_surgery(
                    mod,
                    cache,
                    TrainSettings(loss='ewl1', iters=iters, lr=lr, batch_size=batch_size, seed=0),
                    progress=False,
                )
                if name == 'train_surgery'
                else bare_loop(mod, cache, iters, batch_size, lr, 0)
            )
            sync(device)
            best[name] = max(best[name], iters / (time.perf_counter() - t0))
            hists[name] = h
    same = max(abs(a - b) for a, b in zip(hists['train_surgery'], hists['bare loop']))
    return best, same


def bench_generate(model, tok, prompts, device, new_tokens, repeats, batch=8):
    from darts_nb.surgery import make_surgery, surgery

    if tok is not None:
        enc = tok(prompts[:batch], return_tensors='pt', padding=True).to(device)
    else:
        ids = torch.randint(3, model.config.vocab_size, (batch, 16), device=device)
        enc = dict(input_ids=ids, attention_mask=torch.ones_like(ids))
    torch.manual_seed(0)
    mod = make_surgery('darts', model.config.hidden_size, rank=16, max_len=512).to(device)
    with torch.no_grad():  # a non-trivial module: random position table and up-projection
        for p in mod.parameters():
            p.normal_(0, 0.01)
    kw = dict(
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=model.config.pad_token_id if model.config.pad_token_id is not None else 0,
    )

    def run():
        sync(device)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(**enc, **kw)
        sync(device)
        return (out.shape[1] - enc['input_ids'].shape[1]) * out.shape[0] / (time.perf_counter() - t0)

    run()  # warm-up
    tps = {'plain': [], 'darts attached': []}
    for r in range(repeats):  # adjacent pairs, alternating which goes first: drift in machine load hits both
        for name in ('plain', 'darts attached') if r % 2 == 0 else ('darts attached', 'plain'):
            with surgery(model, mod if name == 'darts attached' else None):
                tps[name].append(run())
    return tps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--device', default=None)
    ap.add_argument('--iters', type=int, default=300)
    ap.add_argument('--new-tokens', type=int, default=64)
    ap.add_argument('--repeats', type=int, default=9)
    ap.add_argument('--zoo', default='toy', choices=['toy', 'ci'])
    ap.add_argument('--max-len', type=int, default=512)
    a = ap.parse_args(argv)
    os.environ.setdefault('HF_HUB_OFFLINE', '1')
    from darts_nb.core import default_device
    from darts_nb.cache import build_cache, CacheSettings

    dev = default_device(a.device)
    m, t, tok, prompts, src = models(dev, a.zoo)
    cache = (
        build_cache(m, t, tok, prompts, settings=CacheSettings(max_len=a.max_len), device=dev, progress=False)
        if tok is not None
        else synth_cache(m, t, dev)
    )
    print(f"models: {src}, device {dev}, torch {torch.__version__}, threads {torch.get_num_threads()}; {cache!r}")
    its, diff = bench_train(cache, dev, a.iters, a.repeats)
    print(
        f"training  train_surgery {its['train_surgery']:8.1f} it/s | bare loop {its['bare loop']:8.1f} it/s | "
        f"ratio {its['train_surgery'] / its['bare loop']:.3f} (target >= 0.8) | max |loss diff| {diff:.2e}"
    )
    tps = bench_generate(m, tok, prompts, dev, a.new_tokens, a.repeats)
    pairs = sorted(d / p for d, p in zip(tps['darts attached'], tps['plain']))

    def med(v):
        return sorted(v)[len(v) // 2]

    print(
        f"generation plain {med(tps['plain']):8.1f} tok/s | DARTS attached {med(tps['darts attached']):8.1f} tok/s "
        f"(medians of {a.repeats}) | ratio {med(pairs):.3f} (median of {a.repeats} adjacent pairs, "
        f"range {pairs[0]:.3f}-{pairs[-1]:.3f}; target >= 0.95)"
    )
    return dict(train=its, generate=tps)


if __name__ == '__main__':
    main()
