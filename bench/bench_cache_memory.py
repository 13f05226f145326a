"""Peak memory of the cache stage, both models side by side against one model at a time (issue 27: the second at
most 0.6x the first where weights dominate), and of the whole calibration of one domain (goal at Llama-2-7B's shape:
at most 16 GB).

Three variants, each in a fresh process (so that none inherits another's high-water mark), on the same random Llama
pair built from a config (a "merged" model and an "expert" with Code Llama's 16 extra tokens; seeded, so every
variant computes with the same weights), over the same prompts (each fills `--max-len` tokens):

- side-by-side: both models built, then `darts_nb.cache.build_cache(merged, expert, ...)`;
- one-at-a-time: `build_cache(load_merged, load_expert, ...)` with loaders: the merged model is built, run and
  dropped before the expert is built;
- calibration: one at a time as above, then the merged model loaded again (an arm holds it to evaluate afterwards)
  while the DARTS module trains on the cache (rank 16, batch 8; `--loss`, EWL1 by default; KL and CE keep the
  expert's LM head weight when the expert is dropped): the whole calibration of one domain.

The peak is the child's resident-set high-water mark (getrusage ru_maxrss, whole process) on a CPU, and
torch.cuda.max_memory_allocated on a GPU (max_memory_reserved is printed beside it). One line per variant, the
memory plan's estimate (`darts_nb.cost.memory_plan`), whether the two caches are identical, and the ratio
one-at-a-time / side-by-side. Nothing is asserted.

Shapes (every one with Llama-2's 32,000-token vocabulary): tiny (hidden 128, 2 layers; seconds: the test suite),
medium (hidden 1024, 8 layers: 0.7 GB per model in float32), large (hidden 2048, 12 layers: 3.0 GB per model in
float32; the CPU default, where weights dominate), llama2-7b (Llama-2-7B's config in bfloat16, 50 prompts x 512
tokens: for a GPU, `--device cuda`; 13.5 GB per model).

    python bench/bench_cache_memory.py [--shape tiny|medium|large|llama2-7b] [--device cpu|cuda]
                                       [--dtype float32|bfloat16] [--prompts N] [--max-len T] [--batch-size B]
                                       [--iters N] [--loss ewl1|l1|kl|ce] [--only VARIANT ...] [--out FILE.json]
"""

from __future__ import annotations
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from darts_nb.cost import LLAMA2_7B

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHAPES = {
    'tiny': dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=344),
    'medium': dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16, intermediate_size=2816),
    'large': dict(hidden_size=2048, num_hidden_layers=12, num_attention_heads=16, intermediate_size=5504),
    'llama2-7b': {},
}
# shape -> (prompts, max_len, iters) unless given
WORKLOAD = {'tiny': (8, 32, 5), 'medium': (16, 128, 20), 'large': (16, 128, 20), 'llama2-7b': (50, 512, 500)}
VARIANTS = ('side-by-side', 'one-at-a-time', 'calibration')
RANK = 16


def configs(shape: str):
    "(merged, expert) LlamaConfigs of `shape`: Llama-2-7B's fields shrunk by SHAPES; the expert with 16 more tokens."
    from transformers import LlamaConfig

    base = {**LLAMA2_7B, 'num_key_value_heads': None, **SHAPES[shape]}
    base['num_key_value_heads'] = base['num_attention_heads']
    common = dict(
        rms_norm_eps=1e-5,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        max_position_embeddings=4096,
    )
    return LlamaConfig(**base, **common), LlamaConfig(**{**base, 'vocab_size': base['vocab_size'] + 16}, **common)


def new_model(cfg, device: str, dtype, seed: int):
    "A random LlamaForCausalLM built directly on `device` in `dtype` (the default initialisation), in eval mode."
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    return model.eval()


def rss_bytes() -> int:
    "This process's resident memory now (Linux)."
    return int(Path('/proc/self/statm').read_text().split()[1]) * os.sysconf('SC_PAGE_SIZE')


# ---------------------------------------------------------------- one variant, in its own process
def child(variant: str, spec: dict) -> dict:
    "Run one variant; its peak memory and where its cache went."
    import torch
    from transformers import AutoTokenizer
    from darts_nb.cache import build_cache, release_memory, CacheSettings

    work, dev = Path(spec['work']), torch.device(spec['device'])
    dtype = getattr(torch, spec['dtype'])
    tok = AutoTokenizer.from_pretrained(work / 'tokenizer')
    prompts = json.loads((work / 'prompts.json').read_text())
    cfg_m, cfg_t = configs(spec['shape'])
    cuda = dev.type == 'cuda'
    if cuda:
        torch.cuda.init()
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    base = torch.cuda.memory_allocated(dev) if cuda else rss_bytes()

    def load_merged():
        return new_model(cfg_m, dev, dtype, seed=0)

    kept = {}

    def load_expert():
        model = new_model(cfg_t, dev, dtype, seed=1)
        if spec['loss'] in ('kl', 'ce'):
            kept['head'] = model.get_output_embeddings().weight.detach()  # all of the expert that KL/CE training needs
        return model

    kw = dict(
        settings=CacheSettings(max_len=spec['max_len'], batch_size=spec['batch_size']), device=dev, progress=False
    )
    t0 = time.perf_counter()
    if variant == 'side-by-side':
        merged, expert = load_merged(), load_expert()
        cache = build_cache(merged, expert, tok, prompts, **kw)
        del merged, expert
    else:
        cache = build_cache(load_merged, load_expert, tok, prompts, **kw)
    if variant == 'calibration':
        from darts_nb.surgery import make_surgery
        from darts_nb.train import train_surgery, TrainSettings

        merged = load_merged()  # held through training, as an arm holds it to evaluate afterwards
        mod = make_surgery('position', cache.hidden_size, rank=RANK, max_len=spec['max_len']).to(dev)
        bs, head = spec['batch_size'], kept.get('head')
        train_surgery(
            mod, cache, TrainSettings(loss=spec['loss'], iters=spec['iters'], batch_size=bs), head=head, progress=False
        )
        del merged, mod
    if cuda:
        torch.cuda.synchronize(dev)
    seconds = time.perf_counter() - t0
    if cuda:
        peak = torch.cuda.max_memory_allocated(dev)
        reserved = torch.cuda.max_memory_reserved(dev)
    else:
        peak, reserved = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, None
    out = work / variant
    cache.save(out)
    del cache
    release_memory()
    return dict(variant=variant, peak=peak, reserved=reserved, base=base, seconds=seconds, cache=str(out))


# ---------------------------------------------------------------- the parent
def prepare(work: Path, n: int, max_len: int) -> None:
    "Prompts that each fill `max_len` tokens and their tokenizer (bench_table8's), written for the children."
    sys.path.insert(0, str(HERE))
    from bench_table8 import calibration_prompts

    texts, tok = calibration_prompts(n, max_len)
    tok.save_pretrained(work / 'tokenizer')
    (work / 'prompts.json').write_text(json.dumps(texts))


def run_child(variant: str, spec: dict) -> dict:
    "One variant in a fresh Python process; its result."
    env = {
        **os.environ,
        'PYTHONPATH': os.pathsep.join([str(ROOT), os.environ.get('PYTHONPATH', '')]).rstrip(os.pathsep),
    }
    env.setdefault('TOKENIZERS_PARALLELISM', 'false')
    spec_file = Path(spec['work']) / 'spec.json'
    spec_file.write_text(json.dumps(spec))
    r = subprocess.run(
        [sys.executable, __file__, '--child', variant, '--spec', str(spec_file)],
        capture_output=True,
        text=True,
        env=env,
    )
    if r.returncode != 0:
        raise SystemExit(f'variant {variant} failed (exit {r.returncode}):\n{r.stdout[-3000:]}{r.stderr[-3000:]}')
    return json.loads(r.stdout.strip().splitlines()[-1])


def compare(a: str, b: str) -> dict:
    "Whether two saved caches hold the same tensors, and their largest difference."
    import torch
    from darts_nb.cache import HiddenCache

    x, y = HiddenCache.load(a, device='cpu'), HiddenCache.load(b, device='cpu')
    same = all(torch.equal(t, y.tensors()[k]) for k, t in x.tensors().items())
    diff = max(float((x.tensors()[k].float() - y.tensors()[k].float()).abs().max()) for k in ('merged', 'target'))
    return dict(identical=same, max_abs_diff=diff)


def gb(b) -> str:
    return 'n/a' if b is None else f'{b / 1e9:.2f} GB'


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        '--shape', default=None, choices=list(SHAPES), help='model size (default: large; llama2-7b on cuda)'
    )
    ap.add_argument('--device', default='cpu', help='cpu or cuda (default cpu)')
    ap.add_argument(
        '--dtype', default=None, choices=['float32', 'bfloat16'], help='default: float32 on cpu, bf16 on cuda'
    )
    ap.add_argument('--prompts', type=int, default=None, help='calibration prompts (default by shape; 7B: 50)')
    ap.add_argument('--max-len', type=int, default=None, help='tokens per prompt (default by shape; 7B: 512)')
    ap.add_argument('--batch-size', type=int, default=8, help='prompts per forward pass and per training step')
    ap.add_argument('--iters', type=int, default=None, help='training steps of the calibration (default by shape)')
    ap.add_argument('--loss', default='ewl1', choices=['l1', 'ewl1', 'kl', 'ce'], help='the calibration loss')
    ap.add_argument('--only', nargs='*', choices=VARIANTS, default=list(VARIANTS), help='the variants to run')
    ap.add_argument('--out', default=None, help='write the results as JSON here')
    ap.add_argument('--child', default=None, help=argparse.SUPPRESS)
    ap.add_argument('--spec', default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child, json.loads(Path(a.spec).read_text()))))
        return None
    import torch

    dev = torch.device(a.device)
    if dev.type not in ('cpu', 'cuda'):
        ap.error(f'--device {a.device}: expected cpu or cuda')
    if dev.type == 'cuda' and not torch.cuda.is_available():
        ap.error(
            f'--device {a.device}: CUDA is not available here; expected a machine with an NVIDIA GPU, or --device cpu'
        )
    shape = a.shape or ('llama2-7b' if dev.type == 'cuda' else 'large')
    n, max_len, iters = WORKLOAD[shape]
    n, max_len, iters = a.prompts or n, a.max_len or max_len, a.iters or iters
    for k, v in (('prompts', n), ('max-len', max_len), ('batch-size', a.batch_size), ('iters', iters)):
        if v < 1:
            ap.error(f'--{k}={v}: expected an integer >= 1')
    dtype = a.dtype or ('bfloat16' if dev.type == 'cuda' else 'float32')
    if shape == 'llama2-7b' and dev.type == 'cpu':
        print('warning: Llama-2-7B-shaped models on a CPU need about 2 x 27 GB (float32) or 2 x 13.5 GB (bfloat16)')
    from darts_nb.cost import memory_plan, weight_count

    cfg_m, cfg_t = configs(shape)
    name = torch.cuda.get_device_name(dev) if dev.type == 'cuda' else f'CPU ({os.cpu_count()} cores)'
    print(
        f'device: {name}; torch {torch.__version__}; shape {shape} ({weight_count(cfg_m.to_dict()) / 1e6:,.1f} M '
        f'parameters per model, {dtype}); {n} prompts x {max_len} tokens, batch {a.batch_size}; '
        f'calibration: {iters} iterations, rank {RANK}, loss {a.loss}',
        flush=True,
    )
    sizes = dict(batch_size=a.batch_size, calib_n=n, max_len=max_len, loss=a.loss)
    plan = memory_plan(cfg_t.to_dict(), device=a.device, **sizes)
    plan_note = '' if plan.dtype == dtype else f' (the plan assumes {plan.dtype} on {dev.type})'
    print(f'memory plan: one at a time {gb(plan.peak)}, side by side {gb(plan.side_by_side)}{plan_note}', flush=True)
    what = (
        'torch.cuda.max_memory_allocated' if dev.type == 'cuda' else 'peak resident memory (ru_maxrss) of the process'
    )
    res = {}
    with tempfile.TemporaryDirectory(prefix='cache-memory-') as d:
        prepare(Path(d), n, max_len)
        spec = dict(
            work=d, device=a.device, dtype=dtype, shape=shape, max_len=max_len, batch_size=a.batch_size, iters=iters
        )
        spec['loss'] = a.loss
        for v in a.only:
            r = run_child(v, spec)
            res[v] = r
            extra = f', reserved {gb(r["reserved"])}' if r['reserved'] is not None else f', at start {gb(r["base"])}'
            print(f'{v:14s} peak {gb(r["peak"])} ({what}{extra}; {r["seconds"]:.1f} s)', flush=True)
        if 'side-by-side' in res and 'one-at-a-time' in res:
            res['caches'] = compare(res['side-by-side']['cache'], res['one-at-a-time']['cache'])
    out = dict(
        device=name,
        shape=shape,
        dtype=dtype,
        settings=dict(prompts=n, max_len=max_len, batch_size=a.batch_size, iters=iters, loss=a.loss),
        plan=dict(one_at_a_time=plan.peak, side_by_side=plan.side_by_side, dtype=plan.dtype),
        results={k: v for k, v in res.items() if k in VARIANTS},
    )
    if 'caches' in res:
        c = res['caches']
        out['caches'] = c
        print(f"caches: {'identical' if c['identical'] else 'differ'} (largest |difference| {c['max_abs_diff']:.3g})")
        s, o = res['side-by-side'], res['one-at-a-time']
        out['ratio'] = o['peak'] / s['peak']
        line = f"ratio one-at-a-time / side-by-side: {out['ratio']:.2f} (target at most 0.6 where weights dominate)"
        if dev.type == 'cpu':
            out['growth_ratio'] = (o['peak'] - o['base']) / max(1, s['peak'] - s['base'])
            line += f"; of the growth beyond the process's start: {out['growth_ratio']:.2f}"
        print(line)
    if 'calibration' in res:
        goal = ' (goal at Llama-2-7B: at most 16 GB)' if shape == 'llama2-7b' else ''
        print(f"whole calibration of one domain, one model at a time: {gb(res['calibration']['peak'])}{goal}")
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))
        print(f'wrote {a.out}')
    return out


if __name__ == '__main__':
    main()
