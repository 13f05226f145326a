"""What differs between machines: the same recipe and the same training, run on this processor, against a reference.

CPU float arithmetic differs between processors (the order of a matrix product's sums, vectorised instructions, the
number of threads that split a sum), so the same code ends in slightly different numbers, and training amplifies
the difference. This measures it in two places, each against artefacts made elsewhere (carried here as files):

- the zoo: the ci zoo built here from the recipe (`zoo.build_zoo('ci')` in a fresh DARTS_HOME), against a
  reference ci zoo: per model, the largest absolute weight difference, the relative Frobenius distance, and how
  often the two models' greedy next tokens agree on the math domain's held-out items;
- surgery training: a DARTS module trained here on a reference hidden-state cache (the paper's recipe, seed 0),
  against the module trained on the same cache elsewhere: weight differences and the held-out L1 reduction.

    python bench/bench_machines.py --reference-zoo DIR --cache FILE --module DIR [--threads N] [--out DIR]

`--make-reference OUT` instead writes the cache and the module trained here into OUT (run it on the reference
machine first; the reference zoo is its DARTS_HOME's zoo-ci). One line per measurement is printed."""

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

ROLES = ('base', 'code', 'math', 'instruct')


def weight_diffs(a: Path, b: Path) -> dict:
    "Largest absolute difference and relative Frobenius distance between two checkpoints' tensors."
    from safetensors.torch import load_file

    ta, tb = load_file(str(a / 'model.safetensors')), load_file(str(b / 'model.safetensors'))
    worst, num, den = 0.0, 0.0, 0.0
    for k, x in ta.items():
        d = (x.float() - tb[k].float()).abs()
        worst = max(worst, d.max().item())
        num += d.pow(2).sum().item()
        den += x.float().pow(2).sum().item()
    return dict(max_abs=worst, rel_frobenius=(num / den) ** 0.5)


def next_token_agreement(a: Path, b: Path, n: int = 40) -> float:
    "Share of positions where the two models' greedy next tokens agree, over n held-out math texts."
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from darts_nb.domains import load_split, training_text

    tok = AutoTokenizer.from_pretrained(a)
    ma = AutoModelForCausalLM.from_pretrained(a, dtype=torch.float32).eval()
    mb = AutoModelForCausalLM.from_pretrained(b, dtype=torch.float32).eval()
    same = total = 0
    with torch.no_grad():
        for it in load_split('math', 'eval')[:n]:
            ids = tok(training_text(it), return_tensors='pt', truncation=True, max_length=512)['input_ids']
            pa, pb = ma(ids).logits.argmax(-1), mb(ids).logits.argmax(-1)
            same += (pa == pb).sum().item()
            total += pa.numel()
    return same / total


def build_here(home: Path) -> Path:
    "The ci zoo built from the recipe in a fresh DARTS_HOME; returns its folder."
    os.environ['DARTS_HOME'] = str(home)
    from darts_nb.zoo import build_zoo, zoo_dir

    t0 = time.time()
    build_zoo('ci')
    print(f'ci zoo built here in {time.time() - t0:.0f} s', flush=True)
    return zoo_dir('ci')


def make_cache(zoo: Path, out: Path) -> Path:
    "The (ta-0.5-like average of base and math, math expert) cache on 50 calibration prompts, saved to `out`."
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from darts_nb.cache import build_cache
    from darts_nb.domains import load_split, calibration_text

    tok = AutoTokenizer.from_pretrained(zoo / 'base')
    base = AutoModelForCausalLM.from_pretrained(zoo / 'base', dtype=torch.float32).eval()
    math = AutoModelForCausalLM.from_pretrained(zoo / 'math', dtype=torch.float32).eval()
    merged = AutoModelForCausalLM.from_pretrained(zoo / 'base', dtype=torch.float32).eval()
    with torch.no_grad():
        for p, pb, pm in zip(merged.parameters(), base.parameters(), math.parameters()):
            p.copy_(0.5 * (pb + pm))
    texts = [calibration_text(it, 'prompt') for it in load_split('math', 'calib')[:50]]
    cache = build_cache(merged, math, tok, texts, device='cpu', progress=False)
    cache.save(out)
    return out


def train_here(cache_path: Path, out: Path) -> tuple:
    "DARTS (position, EWL1, paper defaults, seed 0) trained here on the cache; returns (module, rho_L1 %)."
    from darts_nb.cache import HiddenCache
    from darts_nb.surgery import make_surgery, save_surgery
    from darts_nb.train import train_surgery, l1_reduction, TrainSettings
    from darts_nb.core import set_seed

    cache = HiddenCache.load(cache_path, device='cpu')
    set_seed(0)
    module = make_surgery('position', cache.merged.shape[-1], rank=16)
    train_surgery(module, cache, TrainSettings(loss='ewl1', iters=500, seed=0), progress=False)
    module.eval()
    save_surgery(module, out)
    return module, 100 * l1_reduction(module, cache)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--make-reference', metavar='OUT', help='write the cache and the module trained here into OUT')
    ap.add_argument('--zoo', help='the ci zoo to make the reference cache from (default: DARTS_HOME/zoo-ci)')
    ap.add_argument('--reference-zoo', help='a ci zoo built elsewhere')
    ap.add_argument('--cache', help='the reference cache (from --make-reference)')
    ap.add_argument('--module', help='the module trained elsewhere on that cache')
    ap.add_argument('--threads', type=int, default=None, help='torch threads here (default: torch default)')
    ap.add_argument('--out', default=None, help='write the results as JSON here')
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    import platform

    here = dict(machine=platform.processor() or platform.machine(), threads=torch.get_num_threads())
    print(f'here: {here}', flush=True)
    if a.make_reference:
        out = Path(a.make_reference)
        out.mkdir(parents=True, exist_ok=True)
        from darts_nb.zoo import zoo_dir

        zoo = Path(a.zoo) if a.zoo else zoo_dir('ci')
        make_cache(zoo, out / 'cache')
        _, rho = train_here(out / 'cache', out / 'module')
        print(f'reference module trained: rho_L1 {rho:.3f} %')
        return 0
    res = dict(here=here)
    work = Path(tempfile.mkdtemp())
    try:
        if a.reference_zoo:
            built = build_here(work / 'home')
            for r in ROLES:
                d = weight_diffs(built / r, Path(a.reference_zoo) / r)
                d['next_token_agreement'] = next_token_agreement(built / r, Path(a.reference_zoo) / r)
                res[f'zoo {r}'] = d
                print(
                    f"zoo {r:8s}: max |dw| {d['max_abs']:.3g}, relative Frobenius {d['rel_frobenius']:.3g}, "
                    f"greedy next token agrees {100 * d['next_token_agreement']:.1f} %",
                    flush=True,
                )
        if a.cache and a.module:
            from darts_nb.surgery import load_surgery
            from darts_nb.cache import HiddenCache
            from darts_nb.train import l1_reduction

            mine, rho = train_here(Path(a.cache), work / 'module')
            theirs = load_surgery(a.module)
            pairs = list(zip(mine.state_dict().values(), theirs.state_dict().values()))
            worst = max((p - q).abs().max().item() for p, q in pairs)
            num = sum((p - q).pow(2).sum().item() for p, q in pairs)
            rel = (num / sum(q.pow(2).sum().item() for _, q in pairs)) ** 0.5
            rho_ref = 100 * l1_reduction(theirs, HiddenCache.load(a.cache, device='cpu'))
            res['surgery'] = dict(max_abs=worst, rel_frobenius=rel, rho_here=rho, rho_reference=rho_ref)
            print(
                f'surgery: max |dw| {worst:.3g}, relative Frobenius {rel:.3g}; rho_L1 {rho:.3f} % here, '
                f'{rho_ref:.3f} % on the reference machine'
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / 'machines.json').write_text(json.dumps(res, indent=1))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
