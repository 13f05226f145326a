"""Table 8 of the paper (calibration cost) at Llama-2-7B scale, with random weights: nothing is downloaded.

Two random checkpoints are written first (bf16 safetensors, one shared tokenizer; timed as "make", not part of
Table 8): a "merged" model with Llama-2-7B's config (hidden 4096, 32 layers, 32 heads / 32 KV heads, intermediate
11008, vocab 32000, 4096 positions, rope_theta 1e4) and a "target" standing in for the code expert with Code Llama's
quirks (vocab 32016, rope_theta 1e6, 16384 positions). Then `darts_nb.cost.calibration_cost` runs once per kind,
Standard (Yang et al.; kind 'standard') and DARTS (kind 'position'), both with the EWL1 loss as the project's own
cost experiment (`darts_nb.paper.exp_cost`) does: 50 calibration prompts that each fill T_max = 512 tokens, batch 8,
500 iterations, rank 16. Last, greedy-generation tokens / s of the merged model, plain against with a random
(non-zero) Standard or DARTS module attached, the median over adjacent (plain, attached) pairs.

One table is printed: Table 8's phases (+ the generation rows) x (Standard, DARTS) measured here and as the paper
reports them (A100 80 GB, Llama-2-7B-Code target). With `--out DIR` it is also written as DIR/table8.csv, and
DIR/table8.json holds the raw numbers (value + unit per kind and phase), the configs and notes.

The (32000, 32016)-row pair is checked with `darts_nb.cache.check_pair` on empty (meta-device) models before any
checkpoint is written, so a refusal costs nothing. Before the first timed phase a tiny checkpoint is loaded and run
once (imports, CUDA start-up); loads are measured right after the checkpoints were written, so they come from the
page cache.

Needs about 2 x 13.5 GB of disk and, on CUDA, ~32 GB of GPU memory. `--tiny` shrinks both configs (hidden 64,
2 layers, 4 heads, intermediate 172; vocabularies, rope_theta and positions as above) and the workload (16 prompts
of 64 tokens, 20 iterations, 16 new tokens); it runs on a CPU in well under a minute (the test suite runs it).

    python bench/bench_table8.py [--device cuda|cpu] [--tiny] [--iters 500] [--prompts 50] [--max-len 512]
                                 [--new-tokens 64] [--gen-repeats 5] [--repeats 1] [--out DIR] [--workdir DIR] [--keep]
"""

from __future__ import annotations
import argparse
import gc
import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
import torch
from darts_nb.cost import LLAMA2_7B as LLAMA2_7B_SIZE

# The paper's Table 8 (A100 80 GB; Llama-2-7B merged model, Llama-2-7B-Code target; 50 prompts, T_max 512, batch 8,
# 500 iterations, rank 16), as written there: phase -> (Standard, DARTS).
PAPER = {
    'load_merged': ('3.37 s', '3.46 s'),
    'load_target': ('3.43 s', '3.37 s'),
    'precompute': ('1.81 s', '1.87 s'),
    'train': ('2.40 s', '3.15 s'),
    'total': ('11.01 s', '11.85 s'),
    'peak_memory': ('29.91 GB', '31.49 GB'),
    'cache': ('0.42 GB', '0.42 GB'),
    'surgery_params': ('131,072', '2,228,224'),
    'checkpoint': ('265 KB', '4.46 MB'),
}
GEN_ROWS = {
    'gen_plain': 'generate tokens/s, plain',
    'gen_attached': 'generate tokens/s, module attached',
    'gen_ratio': 'generate ratio (attached / plain)',
}

# Llama-2-7B's sizing fields (one definition, in darts_nb.cost) and the two that generation needs
LLAMA2_7B = {**LLAMA2_7B_SIZE, 'max_position_embeddings': 4096, 'rope_theta': 10000.0}
CODE_QUIRKS = dict(vocab_size=32016, max_position_embeddings=16384, rope_theta=1000000.0)  # Code Llama 7B's differences
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, intermediate_size=172)
TINY_DEFAULTS = dict(iters=20, prompts=16, max_len=64, new_tokens=16, gen_repeats=3)
FULL_DEFAULTS = dict(iters=500, prompts=50, max_len=512, new_tokens=64, gen_repeats=5)
RANK, BATCH, LOSS, TOK_VOCAB = 16, 8, 'ewl1', 512


def configs(tiny: bool):
    "(merged, target) LlamaConfigs: Llama-2-7B and its Code Llama stand-in (shrunk with `tiny`)."
    from transformers import LlamaConfig

    base = {**LLAMA2_7B, **(TINY if tiny else {})}
    common = dict(
        rms_norm_eps=1e-5,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        hidden_act='silu',
        initializer_range=0.02,
    )
    tgt = {**base, **CODE_QUIRKS}
    return LlamaConfig(**base, **common), LlamaConfig(**tgt, **common)


def sync(device):
    if torch.device(device).type == 'cuda':
        torch.cuda.synchronize(device)


def free(device):
    gc.collect()
    if torch.device(device).type == 'cuda':
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- calibration text and tokenizer
WORDS = (
    'value index result items count total buffer node parent child key name path size offset left right data '
    'config cache token stream chunk batch model layer weight score limit queue stack graph edge level'
).split()


def code_lines(rng: random.Random):
    "An endless stream of Python-looking lines."
    while True:
        f, a, b = rng.choice(WORDS), rng.choice(WORDS), rng.choice(WORDS)
        yield rng.choice(
            [
                f'def {f}_{a}({b}, {a}={rng.randint(0, 99)}):',
                f'    {a} = {b}[{rng.randint(0, 9)}] + {rng.randint(1, 999)}',
                f'    if {a} > {b}: return {f}({a} - 1)',
                f'    for {a} in range(len({b})):',
                f'        {b}.append({a} * {rng.randint(2, 9)})',
                f'    # {f} the {a} of every {b}',
                f'    return {a}, {b}',
                f'class {f.title()}{a.title()}:',
                f'    """{f} {a} {b}."""',
            ]
        )


def calibration_prompts(n: int, max_len: int, seed: int = 0):
    "(texts, tokenizer): `n` code-like texts, each at least `max_len` tokens long under the tokenizer trained on them."
    from darts_nb.zoo import train_tokenizer

    rng = random.Random(seed)
    streams = [code_lines(random.Random(rng.random())) for _ in range(n)]
    texts = ['\n'.join(next(s) for _ in range(max(8, max_len // 4))) for s in streams]
    tok = train_tokenizer(texts, vocab_size=TOK_VOCAB)
    for i, s in enumerate(streams):
        while len(tok(texts[i])['input_ids']) < max_len:
            texts[i] += '\n' + '\n'.join(next(s) for _ in range(max(8, max_len // 8)))
    return texts, tok


# ---------------------------------------------------------------- random checkpoints
def new_model(cfg, device, seed: int):
    "A random LlamaForCausalLM built directly on `device` in bf16 (the default initialisation, N(0, 0.02))."
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    return model.to(torch.bfloat16).eval()


def make_checkpoint(cfg, tok, path: Path, device, seed: int):
    "Write a random bf16 safetensors checkpoint with `tok` to `path` (replaced)."
    if path.exists():
        shutil.rmtree(path)
    model = new_model(cfg, device, seed)
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    del model
    free(device)
    return path


def matches(path: Path, cfg) -> bool:
    "A checkpoint at `path` made earlier (with --keep) from the same config."
    try:
        got = json.loads((path / 'config.json').read_text())
    except (OSError, ValueError):
        return False
    keys = (
        'hidden_size',
        'num_hidden_layers',
        'num_attention_heads',
        'num_key_value_heads',
        'intermediate_size',
        'vocab_size',
        'max_position_embeddings',
    )
    return (
        all(got.get(k) == getattr(cfg, k) for k in keys)
        and any(path.glob('*.safetensors'))
        and (path / 'tokenizer.json').exists()
    )


def check_vocab(cfg_m, cfg_t, tok):
    "None if darts_nb accepts this (merged, target) pair for one cache, else its error (checked on meta-device models)."
    from transformers import LlamaForCausalLM
    from darts_nb.cache import check_pair

    with torch.device('meta'):
        m, t = LlamaForCausalLM(cfg_m), LlamaForCausalLM(cfg_t)
    try:
        check_pair(m, t, tok, tok)
        return None
    except ValueError as e:
        return str(e)


def warm_up(tok, path: Path, device):
    "Load a tiny checkpoint and run it once: imports, CUDA context and kernel start-up fall outside every timed phase."
    from darts_nb.zoo import load_model
    from darts_nb.core import final_hidden

    make_checkpoint(configs(True)[0], tok, path, device, seed=99)
    m, _ = load_model(path, device=device)
    with torch.no_grad():
        final_hidden(m, torch.ones(2, 8, dtype=torch.long, device=device))
    sync(device)
    del m
    shutil.rmtree(path, ignore_errors=True)
    free(device)


# ---------------------------------------------------------------- generation
def bench_generate(path, texts, device, new_tokens, repeats, max_len, batch=8):
    "kind -> {plain, attached, ratio}: greedy tokens/s of the merged model, plain and with a random module attached."
    from darts_nb.zoo import load_model
    from darts_nb.cost import COST_KINDS
    from darts_nb.surgery import make_surgery, surgery

    model, tok = load_model(path, device=device)
    enc = tok([t[:120] for t in texts[:batch]], return_tensors='pt', padding=True).to(
        device
    )  # short prompts: stays inside T_max
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)

    def run():
        sync(device)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(**enc, **kw)
        sync(device)
        return (out.shape[1] - enc['input_ids'].shape[1]) * out.shape[0] / (time.perf_counter() - t0)

    run()  # warm-up
    res = {}
    for kind in COST_KINDS:
        torch.manual_seed(0)
        mod = make_surgery(kind, model.config.hidden_size, rank=RANK, max_len=max_len).to(device)
        with torch.no_grad():  # a non-trivial module: random up-projection (and position table)
            for p in mod.parameters():
                p.normal_(0, 0.01)
        tps = {'plain': [], 'attached': []}
        for r in range(repeats):  # adjacent pairs, alternating which goes first
            for name in ('plain', 'attached') if r % 2 == 0 else ('attached', 'plain'):
                with surgery(model, mod if name == 'attached' else None):
                    tps[name].append(run())

        def med(v):
            return sorted(v)[len(v) // 2]

        res[kind] = dict(
            plain=med(tps['plain']),
            attached=med(tps['attached']),
            ratio=med([a / p for a, p in zip(tps['attached'], tps['plain'])]),
            raw=tps,
        )
        print(
            f"  generate {COST_KINDS[kind]:8s} plain {res[kind]['plain']:9.1f} tok/s | "
            f"attached {res[kind]['attached']:9.1f} tok/s | ratio {res[kind]['ratio']:.3f}",
            flush=True,
        )
    return res  # the model goes with this frame; main frees the device memory


# ---------------------------------------------------------------- the table
def build_table(cost, gen, iters):
    "Phases x (Standard, DARTS measured; Standard, DARTS paper) as strings."
    from darts_nb.cost import cost_table, COST_PHASES, COST_KINDS

    t = cost_table(cost)
    rows = {**COST_PHASES, 'train': f'training loop ({iters} it)'}
    if not cost.unit[cost.phase == 'peak_memory'].str.contains('cuda').all():  # calibration_cost's CPU fallback
        rows['peak_memory'] = 'peak memory (CPU RSS growth)'
    t = t.rename(index={COST_PHASES[k]: rows[k] for k in COST_PHASES})
    for k, lab in GEN_ROWS.items():
        key = k.split('_')[1]
        t.loc[lab] = [f"{gen[kind][key]:.3f}" if key == 'ratio' else f"{gen[kind][key]:.1f}" for kind in COST_KINDS]
    paper = {COST_PHASES[k]: v for k, v in PAPER.items()}
    paper[rows['train']] = PAPER['train']
    paper[rows['peak_memory']] = PAPER['peak_memory']
    t['Standard (paper)'] = [paper.get(i, ('n/a', 'n/a'))[0] for i in t.index]
    t['DARTS (paper)'] = [paper.get(i, ('n/a', 'n/a'))[1] for i in t.index]
    return t.rename_axis('phase')


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument('--device', default=None, help='cuda or cpu (default: cuda if available, else cpu)')
    ap.add_argument('--tiny', action='store_true', help='shrunk configs and workload, for a CPU (the test suite)')
    ap.add_argument('--iters', type=int, default=None, help='training steps (default 500; 20 with --tiny)')
    ap.add_argument('--prompts', type=int, default=None, help='calibration prompts (default 50; 16 with --tiny)')
    ap.add_argument('--max-len', type=int, default=None, help='T_max, tokens per prompt (default 512; 64 with --tiny)')
    ap.add_argument(
        '--new-tokens', type=int, default=None, help='greedy tokens per generate call (default 64; 16 with --tiny)'
    )
    ap.add_argument(
        '--gen-repeats',
        type=int,
        default=None,
        help='(plain, attached) generate pairs per kind (default 5; 3 with --tiny)',
    )
    ap.add_argument(
        '--repeats', type=int, default=1, help='calibrations per kind, interleaved; each value is the median'
    )
    ap.add_argument('--out', default=None, help='write table8.csv and table8.json here')
    ap.add_argument('--workdir', default=None, help='where the checkpoints go (default: a temporary directory)')
    ap.add_argument(
        '--keep', action='store_true', help='keep the checkpoints (a later run with the same --workdir reuses them)'
    )
    a = ap.parse_args(argv)
    for k, v in (TINY_DEFAULTS if a.tiny else FULL_DEFAULTS).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    for k in ('iters', 'prompts', 'max_len', 'new_tokens', 'gen_repeats', 'repeats'):
        if getattr(a, k) < 1:
            ap.error(f"--{k.replace('_', '-')}={getattr(a, k)}: expected an integer >= 1")
    if a.device is None:
        a.device = 'cuda' if torch.cuda.is_available() else 'cpu'
    dev = torch.device(a.device)
    if dev.type == 'cuda' and not torch.cuda.is_available():
        ap.error(
            f"--device {a.device}: CUDA is not available here (torch {torch.__version__}, "
            f"built with CUDA {torch.version.cuda}); expected a machine with an NVIDIA GPU, or pass --device cpu"
        )
    if dev.type not in ('cuda', 'cpu'):
        ap.error(f"--device {a.device}: expected cuda or cpu")
    for k, v in (('HF_HUB_OFFLINE', '1'), ('HF_DATASETS_OFFLINE', '1'), ('TOKENIZERS_PARALLELISM', 'false')):
        os.environ.setdefault(k, v)
    from darts_nb.cost import calibration_cost, COST_KINDS, CostSettings
    from darts_nb.cache import CacheSettings
    from darts_nb.train import TrainSettings
    import pandas as pd

    name = (
        torch.cuda.get_device_name(dev)
        if dev.type == 'cuda'
        else f'CPU ({os.cpu_count()} cores, {torch.get_num_threads()} threads)'
    )
    print(
        f"device: {name}; torch {torch.__version__}; {'tiny' if a.tiny else 'Llama-2-7B'} configs; "
        f"{a.prompts} prompts x {a.max_len} tokens, batch {BATCH}, {a.iters} iterations, rank {RANK}, loss {LOSS}",
        flush=True,
    )
    if dev.type == 'cpu' and not a.tiny:
        print("warning: the 7B configs on a CPU load in float32 (~27 GB each) and are very slow")
    notes = []

    t0 = time.perf_counter()
    texts, tok = calibration_prompts(a.prompts, a.max_len)
    cfg_m, cfg_t = configs(a.tiny)
    err = check_vocab(cfg_m, cfg_t, tok)
    if err is not None:
        raise SystemExit(
            f'darts_nb.cache.check_pair refuses the (merged, Code Llama) pair: {err}'
        )  # before writing 27 GB
    tmp = None if a.workdir else Path(tempfile.mkdtemp(prefix='table8-'))
    work = Path(a.workdir).expanduser().absolute() if a.workdir else tmp
    work.mkdir(parents=True, exist_ok=True)
    paths = {'merged': work / 'merged', 'target': work / 'target'}

    def n_par(c):
        return c.vocab_size * c.hidden_size * 2 + c.num_hidden_layers * (
            4 * c.hidden_size**2 + 3 * c.hidden_size * c.intermediate_size
        )

    need = 2 * (n_par(cfg_m) + n_par(cfg_t))  # bf16 bytes of both checkpoints
    free_disk = shutil.disk_usage(work).free
    todo = {k: c for k, c in (('merged', cfg_m), ('target', cfg_t)) if not matches(paths[k], c)}
    if todo and free_disk < need * 1.05:
        raise SystemExit(
            f"--workdir {work}: {free_disk / 1e9:.1f} GB free, the two checkpoints need {need / 1e9:.1f} GB"
        )
    try:
        for seed, (k, c) in enumerate((('merged', cfg_m), ('target', cfg_t))):
            if k not in todo:
                print(f"make: reusing {paths[k]}", flush=True)
                continue
            print(
                f"make: writing the random {k} model ({n_par(c) / 1e6:,.1f} M parameters, "
                f"vocab {c.vocab_size}) to {paths[k]} ...",
                flush=True,
            )
            t1 = time.perf_counter()
            make_checkpoint(c, tok, paths[k], dev, seed)
            sync(dev)
            print(f"make: {k} written in {time.perf_counter() - t1:.1f} s", flush=True)
        make_s = time.perf_counter() - t0
        print(f"make (prompts, tokenizer, both checkpoints; not part of Table 8): {make_s:.1f} s", flush=True)

        warm_up(tok, work / 'warmup', dev)
        frames = []
        for r in range(a.repeats):
            for kind in COST_KINDS if r % 2 == 0 else list(COST_KINDS)[::-1]:
                print(f"calibration {COST_KINDS[kind]} ({kind}), repeat {r + 1}/{a.repeats} ...", flush=True)
                df = calibration_cost(
                    str(paths['merged']),
                    str(paths['target']),
                    'code',
                    settings=CostSettings(
                        kind=kind,
                        rank=RANK,
                        calib_n=a.prompts,
                        cache=CacheSettings(max_len=a.max_len, batch_size=BATCH),
                        train=TrainSettings(loss=LOSS, iters=a.iters, batch_size=BATCH),
                    ),
                    device=dev,
                    prompts=texts,
                    progress=not a.tiny,
                )
                free(dev)
                v = df.set_index('phase').value
                print(
                    f"  load {v['load_merged']:.2f} + {v['load_target']:.2f} s, precompute {v['precompute']:.2f} s, "
                    f"train {v['train']:.2f} s, total {v['total']:.2f} s",
                    flush=True,
                )
                frames.append(df.assign(kind=kind, repeat=r))
        raw = pd.concat(frames, ignore_index=True)
        cost = (
            raw.groupby(['kind', 'phase'], sort=False)
            .agg(value=('value', 'median'), unit=('unit', 'first'))
            .reset_index()
        )
        print(
            f"generation: {a.gen_repeats} (plain, attached) pairs per kind, {a.new_tokens} new tokens, "
            f"batch {BATCH} ...",
            flush=True,
        )
        gen = bench_generate(paths['merged'], texts, dev, a.new_tokens, a.gen_repeats, a.max_len, batch=BATCH)
        free(dev)
    finally:
        if a.keep:
            print(f"checkpoints kept in {work}")
        elif tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            for p in (*paths.values(), work / 'warmup'):
                shutil.rmtree(p, ignore_errors=True)

    table = build_table(cost, gen, a.iters)
    print(
        f"\nTable 8 on {name} (random weights; measured here vs the paper's A100 80 GB"
        f"{'; tiny configs' if a.tiny else ''}{f'; medians of {a.repeats} repeats' if a.repeats > 1 else ''}):"
    )
    with pd.option_context('display.width', 200, 'display.max_colwidth', 40):
        print(table.to_string())
    for n in notes:
        print('note: ' + n)
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / 'table8.csv')

        def cfg(c):
            return {k: v for k, v in c.to_dict().items() if k in (*LLAMA2_7B, 'rope_parameters', 'dtype')}

        res = dict(
            device=name,
            device_type=dev.type,
            torch=torch.__version__,
            tiny=a.tiny,
            make_s=make_s,
            settings=dict(
                prompts=a.prompts,
                max_len=a.max_len,
                iters=a.iters,
                batch_size=BATCH,
                rank=RANK,
                loss=LOSS,
                new_tokens=a.new_tokens,
                gen_repeats=a.gen_repeats,
                repeats=a.repeats,
                tokenizer_vocab=len(tok),
            ),
            configs=dict(merged=cfg(cfg_m), target=cfg(cfg_t)),
            notes=notes,
            measured=cost.to_dict(orient='records'),
            raw=raw.to_dict(orient='records'),
            generate={k: {kk: vv for kk, vv in g.items()} for k, g in gen.items()},
            paper={k: dict(zip(('standard', 'position'), v)) for k, v in PAPER.items()},
            table=json.loads(table.reset_index().to_json(orient='records')),
        )
        (out / 'table8.json').write_text(json.dumps(res, indent=1, default=str))
        print(f"wrote {out / 'table8.csv'} and {out / 'table8.json'}")
    return dict(table=table, cost=cost, generate=gen, notes=notes)


if __name__ == '__main__':
    main()
