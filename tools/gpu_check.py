"""The GPU check of darts_nb, prepared to run once on a bare GPU machine within 10 minutes: install the carried
wheels, then Table 8 (bench/bench_table8.py), the cache stage's memory (bench/bench_cache_memory.py) and Hugging
Face `generate` tokens/s, all at Llama-2-7B's shape with random weights, each step under its own time limit.

The machine has Python 3.12 with a CUDA torch, transformers, peft, pandas, scipy, statsmodels and seaborn, and no
package registry. `tools/gpu_wheels.py`, run beforehand where PyPI is reachable, fills `gpu_wheels/` with what it
lacks (darts_nb itself, fastcore, mergekit, lm-eval, datasets and their small dependencies; under 64 MiB); carry
that folder with the working tree. The steps, in order:

- install: `pip install --no-index --no-deps --upgrade --target WORK/site` of the carried wheels (a wheel whose
  package the machine already has, or that is not built for its Python, is left out and listed); without pip the
  wheels are unpacked. WORK/site goes first on every later step's PYTHONPATH.
- imports: darts_nb's modules that the benches use and fastcore (required), then mergekit, lm-eval, datasets and
  every package just installed (reported): where each imports from, or its error.
- generate: greedy `model.generate` of a random LlamaForCausalLM (hidden 4096, 32 layers, 32 heads, intermediate
  11008, vocab 32000, bfloat16, built on the GPU): 16 prompts of 128 tokens, 128 new tokens (`min_new_tokens`, so
  none stops early), the median of 3 timed calls after a warm-up; tokens/s over all sequences.
- table8: `bench/bench_table8.py --device cuda` (two random 7B checkpoints, ~27 GB of disk in WORK, removed after).
- cache_memory: `bench/bench_cache_memory.py --shape llama2-7b --device cuda` (three variants, fresh processes).

Each step runs in its own process group under its limit (LIMITS: install 45 s, imports 45, generate 90, table8 330,
cache_memory 150), and never past the whole run's budget (570 s): a step stopped at its limit is ended with its
children, recorded as a timeout, and the next step runs. Table 8 and the cache bench are skipped when the required
imports failed.

Results land in `--out` (default `$OUT` when set, else `gpu_results/`): one JSON per step (`install.json`,
`imports.json`, `generate.json`, `table8.json`, `cache_memory.json`: status ok/failed/timeout/skipped, seconds, the
limit, the command, the measured `result`), `summary.json` (rewritten after every step, so a run cut short keeps
what it measured) and `summary.md` (Table 8 as a markdown table, the cache peaks and the tokens/s, ready to paste
into nbs/08_cost.ipynb); the benches' own files go to `raw/`, each step's output to `logs/`.

`--dry-run` prints every command and checks every file the run needs (exit 2 when one is missing, or when the
darts_nb wheel differs from the working tree: rebuild it); `--tiny` runs the same steps at a tiny shape on the CPU
(seconds to a minute each), as the test suite does.

    python tools/gpu_check.py [--wheels gpu_wheels] [--out DIR] [--work DIR] [--dry-run] [--tiny]
                              [--only STEP ...] [--budget SECONDS] [--keep]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gpu_wheels import NAMED_WHEELS, choose_wheels, stale_files, unpack_wheels, wheel_name  # tools/, beside this

ROOT = Path(__file__).resolve().parent.parent
THIS = Path(__file__).resolve()
MIB = 1024**2
CARRY_LIMIT = 64 * MIB  # what may travel with the working tree
REQUIRED_IMPORTS = ('fastcore', 'darts_nb.cost', 'darts_nb.cache', 'darts_nb.surgery', 'darts_nb.train', 'darts_nb.zoo')
OPTIONAL_IMPORTS = ('mergekit.merge', 'lm_eval', 'datasets')
STEPS = ('install', 'imports', 'generate', 'table8', 'cache_memory')
NEEDS_IMPORTS = ('table8', 'cache_memory')  # skipped when the required imports failed
# step -> seconds it may take; the whole run stops within BUDGET (the device runner allows 600 s a command)
LIMITS = {
    'full': dict(install=45, imports=45, generate=90, table8=330, cache_memory=150),
    'tiny': dict(install=60, imports=60, generate=60, table8=120, cache_memory=120),
}
BUDGET = {'full': 570, 'tiny': 400}
LLAMA2_7B = dict(
    hidden_size=4096,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=32,
    intermediate_size=11008,
    vocab_size=32000,
)
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, intermediate_size=172)
# the generate step: the model, the prompts and the timed calls (after a warm-up)
GENERATE = {
    'full': dict(
        config=LLAMA2_7B, dtype='bfloat16', device='cuda', batch=16, prompt_len=128, new_tokens=128, repeats=3
    ),
    'tiny': dict(
        config={**LLAMA2_7B, **TINY},
        dtype='float32',
        device='cpu',
        batch=4,
        prompt_len=16,
        new_tokens=16,
        repeats=3,
    ),
}
# the machine's own packages whose versions the imports step records
MACHINE_PACKAGES = ('torch', 'transformers', 'tokenizers', 'safetensors', 'huggingface_hub', 'accelerate', 'peft')
MACHINE_PACKAGES += ('numpy', 'pandas', 'scipy', 'statsmodels', 'seaborn', 'pip')
STEP_ENV = dict(HF_HUB_OFFLINE='1', HF_DATASETS_OFFLINE='1', TOKENIZERS_PARALLELISM='false', PYTHONUNBUFFERED='1')
# --tiny: one CPU thread per step (tiny matmuls gain nothing from a second; on a shared CPU, OpenMP's second thread
# waits on a busy core at every one: 60 s for the whole run instead of 85 s on a loaded 2-core machine)
TINY_ENV = dict(OMP_NUM_THREADS='1')


@dataclass
class Plan:
    "Where one run reads and writes, and what it runs."

    mode: str  # 'full' (the GPU, Llama-2-7B's shape) or 'tiny' (the CPU, a tiny shape)
    wheels: Path  # the carried wheels (tools/gpu_wheels.py)
    out: Path  # the results: one JSON per step, summary.json, summary.md, raw/, logs/
    work: Path  # scratch: the installed wheels (site/), the benches' checkpoints, the children's specs
    budget: float  # seconds for the whole run
    steps: tuple  # which of STEPS run, in STEPS' order

    @property
    def target(self) -> Path:
        "Where the wheels are installed (first on the steps' PYTHONPATH)."
        return self.work / 'site'

    @property
    def device(self) -> str:
        return GENERATE[self.mode]['device']


# ---------------------------------------------------------------- the wheels
def install_command(plan: Plan, wheels: list[Path]) -> list[str]:
    "pip's install command for `wheels` (or this script's unpacking child where pip is missing)."
    if importlib.util.find_spec('pip') is None:
        return child_command(plan, 'unzip')
    pip = [sys.executable, '-m', 'pip', 'install', '--no-index', '--no-deps', '--upgrade', '--no-compile']
    return pip + ['--disable-pip-version-check', '--target', str(plan.target), *map(str, wheels)]


# ---------------------------------------------------------------- the steps' commands
def child_command(plan: Plan, name: str) -> list[str]:
    "This script, run as child `name` on its spec file in the work folder."
    return [sys.executable, str(THIS), '--child', name, '--spec', str(plan.work / f'{name}.spec.json')]


def bench_command(plan: Plan, name: str) -> list[str]:
    "The command of bench step `name` (table8 or cache_memory) at the plan's shape."
    raw = plan.out / 'raw'
    if name == 'table8':
        size = ['--tiny'] if plan.mode == 'tiny' else []
        where = ['--out', str(raw / 'table8'), '--workdir', str(plan.work / 'table8')]
        return [sys.executable, 'bench/bench_table8.py', '--device', plan.device, *size, *where]
    shape = 'tiny' if plan.mode == 'tiny' else 'llama2-7b'
    where = ['--out', str(raw / 'cache_memory.json')]
    return [sys.executable, 'bench/bench_cache_memory.py', '--shape', shape, '--device', plan.device, *where]


def child_spec(plan: Plan, name: str, wheels: list[Path]) -> dict:
    "What child `name` reads: its settings and where it writes its result."
    spec = dict(result=str(plan.work / f'{name}.result.json'), target=str(plan.target))
    if name == 'generate':
        spec.update(GENERATE[plan.mode])
    elif name == 'imports':
        spec.update(required=list(REQUIRED_IMPORTS), optional=list(OPTIONAL_IMPORTS))
    elif name == 'unzip':
        spec.update(wheels=[str(w) for w in wheels])
    return spec


def step_command(plan: Plan, name: str, wheels: list[Path]) -> list[str]:
    "The command that runs step `name`."
    if name == 'install':
        return install_command(plan, wheels)
    if name in ('imports', 'generate'):
        return child_command(plan, name)
    return bench_command(plan, name)


def step_env(plan: Plan) -> dict:
    "The steps' environment: the installed wheels first on PYTHONPATH, offline hubs, a DARTS_HOME of the run's own."
    home = plan.work / 'darts_home'
    paths = [str(plan.target), os.environ.get('PYTHONPATH', '')]
    extra = dict(STEP_ENV, DARTS_HOME=str(home), HF_MODULES_CACHE=str(home / 'hf_modules'))
    if plan.mode == 'tiny':
        extra.update(TINY_ENV)
    return {**os.environ, **extra, 'PYTHONPATH': os.pathsep.join(p for p in paths if p)}


# ---------------------------------------------------------------- running one step
def stop_group(proc: subprocess.Popen) -> None:
    "End a step that is still running: its whole process group (the step and its children), TERM, then KILL."
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return  # nothing of the group is left
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            continue


def run_command(plan: Plan, name: str, argv: list[str], limit: float) -> dict:
    "Run one step's command under `limit` seconds, its output to logs/NAME.log; status, exit code and seconds."
    log = plan.out / 'logs' / f'{name}.log'
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(log, 'w') as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=step_env(plan), process_group=0)
        try:
            rc = proc.wait(timeout=limit)
            status = 'ok' if rc == 0 else 'failed'
        except subprocess.TimeoutExpired:
            rc, status = None, 'timeout'
        finally:
            if proc.returncode is None:  # stopped at its limit, or this run was stopped
                stop_group(proc)
    seconds = time.perf_counter() - t0
    rec = dict(step=name, status=status, returncode=rc, seconds=round(seconds, 2), limit_s=round(limit, 1))
    rec.update(command=shlex.join(argv), log=str(log.relative_to(plan.out)))
    if status != 'ok':
        rec['log_tail'] = log.read_text(errors='replace')[-3000:]
    return rec


def read_json(path: Path) -> dict | None:
    "A JSON file's content, or None when it is missing or cut short."
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def write_json(path: Path, obj) -> None:
    "Write `obj` as JSON, whole or not at all (a temporary file renamed over `path`)."
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f'.{path.name}.tmp-{os.getpid()}')
    tmp.write_text(json.dumps(obj, indent=1, default=str) + '\n')
    os.replace(tmp, path)


# ---------------------------------------------------------------- what each step measured
def table8_result(plan: Plan) -> dict | None:
    "bench_table8's JSON, less its raw repeats: the device, settings, phases per kind, generation and the table."
    raw = read_json(plan.out / 'raw' / 'table8' / 'table8.json')
    if raw is None:
        return None
    res = {k: raw.get(k) for k in ('device', 'torch', 'tiny', 'make_s', 'settings', 'measured', 'table')}
    res['generate'] = {kind: {k: v for k, v in g.items() if k != 'raw'} for kind, g in raw['generate'].items()}
    res['files'] = ['raw/table8/table8.csv', 'raw/table8/table8.json']
    return res


def cache_memory_result(plan: Plan) -> dict | None:
    "bench_cache_memory's JSON in GB: each variant's peak, the plan's estimates, the ratio and the caches' check."
    raw = read_json(plan.out / 'raw' / 'cache_memory.json')
    if raw is None:
        return None

    def gb(b):
        return None if b is None else round(b / 1e9, 3)

    peaks = {
        v: dict(peak_gb=gb(r['peak']), reserved_gb=gb(r['reserved']), start_gb=gb(r['base']), seconds=r['seconds'])
        for v, r in raw['results'].items()
    }
    res = {k: raw.get(k) for k in ('device', 'shape', 'dtype', 'settings', 'caches', 'ratio', 'growth_ratio')}
    plan_gb = {k: gb(raw['plan'][k]) for k in ('one_at_a_time', 'side_by_side')}
    res.update(peaks=peaks, plan_gb=plan_gb, files=['raw/cache_memory.json'])
    return res


def step_result(plan: Plan, name: str, install: dict) -> dict | None:
    "What step `name` measured (None when it left nothing)."
    if name == 'install':
        return install
    if name in ('imports', 'generate'):
        return read_json(plan.work / f'{name}.result.json')
    if name == 'table8':
        return table8_result(plan)
    return cache_memory_result(plan)


def install_plan(plan: Plan) -> dict:
    "Which carried wheels the install step installs here and which it leaves out (why), and a stale darts_nb."
    wheels = sorted(plan.wheels.glob('*.whl'))
    chosen, left = choose_wheels(wheels)
    darts = [w for w in wheels if wheel_name(w) == 'darts_nb']
    stale = stale_files(darts[0]) if darts else []
    method = 'pip' if importlib.util.find_spec('pip') is not None else 'unzip'
    return dict(target=str(plan.target), method=method, wheels=chosen, left_out=left, darts_nb_stale=stale)


def skipped(name: str, why: str) -> dict:
    "The record of a step that did not run, and why."
    return dict(step=name, status='skipped', returncode=None, seconds=0.0, limit_s=0.0, why=why)


def run_step(plan: Plan, name: str, install: dict, deadline: float, records: list) -> dict:
    "Run step `name` within its limit and what is left of the budget; its record, with what it measured."
    limit = min(LIMITS[plan.mode][name], deadline - time.monotonic())
    imports = result_of(records, 'imports')
    failed_imports = imports.get('required_ok') is False  # not known (no result): the bench says it itself
    if limit < 5:
        return skipped(name, f'{limit:.0f} s left of the {plan.budget:g} s budget')
    if name in NEEDS_IMPORTS and failed_imports:
        return skipped(name, 'the required imports failed (imports.json)')
    if name == 'install' and not install['wheels']:
        rec = skipped(name, f'no wheel to install from {plan.wheels}')
        rec['result'] = {**install, 'wheels': []}
        return rec
    if name in ('imports', 'generate') or (name == 'install' and install['method'] == 'unzip'):
        child = name if name != 'install' else 'unzip'
        write_json(plan.work / f'{child}.spec.json', child_spec(plan, child, install['wheels']))
    rec = run_command(plan, name, argv=step_command(plan, name, install['wheels']), limit=limit)
    if name == 'table8':
        shutil.rmtree(plan.work / 'table8', ignore_errors=True)  # ~27 GB of checkpoints, if the bench was stopped
    result = step_result(plan, name, {**install, 'wheels': [w.name for w in install['wheels']]})
    if rec['status'] == 'ok' and result is None:
        rec['status'] = 'failed'
        rec['why'] = 'it left no result file'
    rec['result'] = result
    return rec


# ---------------------------------------------------------------- the children (this script, in a fresh process)
def installed_modules(target: Path) -> list[str]:
    "The top-level modules that the wheels installed into `target` provide (from their RECORD files)."
    names = set()
    for record in target.glob('*.dist-info/RECORD'):
        for line in record.read_text().splitlines():
            path = line.split(',')[0]
            first = path.split('/')[0]
            if '/' in path:
                name = first if first.isidentifier() else ''  # a package (not `x.dist-info`, `scikit_learn.libs`)
            else:
                name = first.split('.')[0] if first.endswith(('.py', '.so')) else ''  # a module file
            if name and not name.startswith('_'):
                names.add(name)
    return sorted(names - {'tests', 'test', 'docs', 'examples', 'benchmarks', 'bin'})


def import_report(name: str) -> dict:
    "Import module `name`: where it came from and how long it took, or its error."
    import importlib

    t0 = time.perf_counter()
    try:
        mod = importlib.import_module(name)
    except BaseException as e:  # a module may exit or raise anything while it imports
        return dict(ok=False, error=f'{type(e).__name__}: {e}'[:500])
    return dict(ok=True, origin=getattr(mod, '__file__', None), seconds=round(time.perf_counter() - t0, 3))


def child_imports(spec: dict) -> int:
    "Import the required modules, the optional ones and every installed package; 1 when a required one fails."
    from importlib import metadata

    versions = {}
    for package in MACHINE_PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    required, optional = spec['required'], spec['optional']
    names = required + optional
    names += [m for m in installed_modules(Path(spec['target'])) if m not in names]
    modules = {}
    for name in names:  # the result is rewritten after each: a step stopped at its limit still says what imported
        modules[name] = import_report(name)
        print(f"{name}: {modules[name].get('origin') or modules[name].get('error')}", flush=True)
        ok = all(modules[n]['ok'] for n in required if n in modules)
        failed = [n for n, r in modules.items() if not r['ok']]
        result = dict(required_ok=ok, required=required, failed=failed, versions=versions, modules=modules)
        result['done'] = len(modules) == len(names)
        write_json(Path(spec['result']), result)
    return 0 if ok else 1


def random_llama(spec: dict):
    "A random LlamaForCausalLM of `spec['config']`, built directly on its device in its dtype, in eval mode."
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        **spec['config'],
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, spec['dtype']))
    try:
        with torch.device(spec['device']):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    return model.eval()


def timed_generate(model, ids, new_tokens: int) -> float:
    "Seconds of one greedy `generate` of exactly `new_tokens` tokens after each prompt of `ids`."
    import torch

    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    cuda = ids.device.type == 'cuda'
    if cuda:
        torch.cuda.synchronize(ids.device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kw)
    if cuda:
        torch.cuda.synchronize(ids.device)
    seconds = time.perf_counter() - t0
    if out.shape[1] != ids.shape[1] + new_tokens:
        raise RuntimeError(f'generate made {out.shape[1] - ids.shape[1]} tokens per prompt, expected {new_tokens}')
    return seconds


def device_name(device) -> str:
    import torch

    if device.type == 'cuda':
        return torch.cuda.get_device_name(device)
    return f'CPU ({os.cpu_count()} cores, {torch.get_num_threads()} threads)'


def child_generate(spec: dict) -> int:
    "Greedy generate tokens/s of a random Llama: a warm-up, the prefill alone, then `repeats` timed calls."
    import torch
    import transformers

    dev = torch.device(spec['device'])
    if dev.type == 'cuda':
        torch.cuda.reset_peak_memory_stats(dev)
    t0 = time.perf_counter()
    model = random_llama(spec)
    build_s = time.perf_counter() - t0
    batch, new = spec['batch'], spec['new_tokens']
    ids = torch.randint(
        3, spec['config']['vocab_size'], (batch, spec['prompt_len']), generator=torch.Generator().manual_seed(0)
    )
    ids = ids.to(dev)
    timed_generate(model, ids, new_tokens=min(8, new))  # warm-up: kernels, caches, the allocator
    prefill_s = timed_generate(model, ids, new_tokens=1)
    runs = [timed_generate(model, ids, new_tokens=new) for _ in range(spec['repeats'])]
    print(f'generate: {batch} x {new} tokens in {[round(s, 3) for s in runs]} s', flush=True)
    med = statistics.median(runs)
    res = {k: spec[k] for k in ('config', 'dtype', 'batch', 'prompt_len', 'new_tokens', 'repeats')}
    res.update(
        device=device_name(dev),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        transformers=transformers.__version__,
        build_s=round(build_s, 3),
        prefill_s=prefill_s,
        seconds=runs,
        tokens_per_s=batch * new / med,
        tokens_per_s_per_sequence=new / med,
        decode_tokens_per_s=batch * (new - 1) / (med - prefill_s) if med > prefill_s else None,  # None: noise
        peak_memory_bytes=torch.cuda.max_memory_allocated(dev) if dev.type == 'cuda' else None,
    )
    write_json(Path(spec['result']), res)
    print(f"generate: {res['tokens_per_s']:.1f} tokens/s on {res['device']}", flush=True)
    return 0


def child_unzip(spec: dict) -> int:
    "The install step where pip is missing: unpack the wheels into the target."
    names = unpack_wheels(spec['wheels'], Path(spec['target']))
    write_json(Path(spec['result']), dict(unpacked=names))
    return 0


CHILDREN = {'imports': child_imports, 'generate': child_generate, 'unzip': child_unzip}


# ---------------------------------------------------------------- the summary
def result_of(records: list, name: str) -> dict:
    "What step `name` measured, or {} when it did not run or left nothing."
    return next((r.get('result') or {} for r in records if r['step'] == name), {})


def headline(records: list) -> dict:
    "The numbers a notebook cites: tokens/s, Table 8's totals and peaks, the cache stage's peaks."
    out = {}
    gen = result_of(records, 'generate')
    if gen:
        out['generate_tokens_per_s'] = round(gen['tokens_per_s'], 1)
        out['generate_decode_tokens_per_s'] = gen['decode_tokens_per_s'] and round(gen['decode_tokens_per_s'], 1)
    t8 = result_of(records, 'table8')
    for m in t8.get('measured') or []:
        if m['phase'] in ('total', 'peak_memory'):
            out.setdefault(f"table8_{m['phase']}", {})[m['kind']] = m['value']
    if t8:
        out['table8_generate_ratio'] = {kind: g['ratio'] for kind, g in t8['generate'].items()}
    cm = result_of(records, 'cache_memory')
    if cm:
        out['cache_memory_peak_gb'] = {v: p['peak_gb'] for v, p in cm['peaks'].items()}
        out['cache_memory_ratio'] = cm.get('ratio')
    return out


def summary(plan: Plan, records: list, started: float) -> dict:
    "summary.json: the run, each step's status and time, the device and the headline numbers."
    import platform

    devices = [result_of(records, n).get('device') for n in ('generate', 'table8', 'cache_memory')]
    return dict(
        mode=plan.mode,
        started=time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started)),
        seconds=round(time.time() - started, 1),
        budget_s=plan.budget,
        device=next((d for d in devices if d), None),
        python=platform.python_version(),
        versions=result_of(records, 'imports').get('versions'),
        platform=platform.platform(),
        steps={r['step']: {k: r.get(k) for k in ('status', 'seconds', 'limit_s')} for r in records},
        headline=headline(records),
        files=[f"{r['step']}.json" for r in records] + ['summary.json', 'summary.md', 'raw/', 'logs/'],
    )


def markdown_table(rows: list[dict]) -> list[str]:
    "`rows` (dicts with the same keys) as the lines of a markdown table."
    keys = list(rows[0])
    lines = ['| ' + ' | '.join(keys) + ' |', '|' + '---|' * len(keys)]
    return lines + ['| ' + ' | '.join(str(r[k]) for k in keys) + ' |' for r in rows]


def summary_markdown(records: list, info: dict) -> str:
    "summary.md: the steps, Table 8 as a markdown table, the cache stage's peaks and the tokens/s, ready to paste."
    lines = [f"GPU check ({info['mode']} mode) on {info['device']}, {info['started']}, {info['seconds']} s in all:", '']
    steps = [
        dict(step=s, status=v['status'], seconds=v['seconds'], limit_s=v['limit_s']) for s, v in info['steps'].items()
    ]
    lines += markdown_table(steps) + ['']
    t8 = result_of(records, 'table8')
    if t8:
        s = t8['settings']
        lines += [
            f"Table 8 (`bench/bench_table8.py`, random weights; {s['prompts']} prompts x {s['max_len']} tokens, "
            f"batch {s['batch_size']}, {s['iters']} iterations, rank {s['rank']}) on {t8['device']}:",
            '',
        ]
        lines += markdown_table(t8['table']) + ['']
    cm = result_of(records, 'cache_memory')
    if cm:
        peaks = ', '.join(f"{v} {p['peak_gb']:.2f} GB" for v, p in cm['peaks'].items())
        ratio = '' if cm.get('ratio') is None else f"; one at a time / side by side {cm['ratio']:.2f}"
        plan_gb = cm['plan_gb']
        lines += [
            f"Cache stage (`bench/bench_cache_memory.py --shape {cm['shape']}`, {cm['dtype']}) on {cm['device']}: "
            f"peak {peaks}{ratio} (the plan: {plan_gb['one_at_a_time']:.2f} GB one at a time, "
            f"{plan_gb['side_by_side']:.2f} GB side by side).",
            '',
        ]
    gen = result_of(records, 'generate')
    if gen:
        c = gen['config']
        lines += [
            f"HF generate (random Llama, hidden {c['hidden_size']}, {c['num_hidden_layers']} layers, {gen['dtype']}; "
            f"{gen['batch']} prompts x {gen['prompt_len']} tokens, {gen['new_tokens']} new tokens, greedy) on "
            f"{gen['device']}: {gen['tokens_per_s']:.1f} tokens/s ({gen['tokens_per_s_per_sequence']:.1f} per "
            f"sequence; prefill {gen['prefill_s']:.3f} s; torch {gen['torch']}, transformers {gen['transformers']}).",
            '',
        ]
    return '\n'.join(lines)


def write_summary(plan: Plan, records: list, started: float) -> str:
    "Write summary.json and summary.md; the markdown."
    info = summary(plan, records, started)
    write_json(plan.out / 'summary.json', info)
    text = summary_markdown(records, info)
    (plan.out / 'summary.md').write_text(text)
    return text


# ---------------------------------------------------------------- checks, the dry run and the run
def check_plan(plan: Plan) -> tuple[list[str], list[str]]:
    "(problems, notes) about the files the run needs: the benches, the wheels, their size, a stale darts_nb."
    problems, notes = [], []
    for path, what in (
        (ROOT / 'bench' / 'bench_table8.py', 'table8'),
        (ROOT / 'bench' / 'bench_cache_memory.py', 'cache_memory'),
    ):
        if not path.is_file():
            problems.append(f'missing: {path} (the {what} step)')
    wheels = sorted(plan.wheels.glob('*.whl')) if plan.wheels.is_dir() else []
    if not plan.wheels.is_dir():
        problems.append(f'missing: --wheels {plan.wheels} (a folder of *.whl: python tools/gpu_wheels.py builds it)')
    lacking = [n for n in NAMED_WHEELS if not any(wheel_name(w) == n for w in wheels)]
    if lacking and plan.mode == 'full':
        problems.append(f'missing in {plan.wheels}: wheels of {", ".join(lacking)} (python tools/gpu_wheels.py)')
    elif lacking:
        notes.append(f'no wheel of {", ".join(lacking)} in {plan.wheels}: the steps use this environment\'s')
    total = sum(w.stat().st_size for w in wheels)
    if total > CARRY_LIMIT:
        problems.append(
            f'{plan.wheels}: {total / MIB:.1f} MiB of wheels, over the {CARRY_LIMIT // MIB} MiB that travel'
        )
    notes.append(f'{len(wheels)} wheels in {plan.wheels}, {total / MIB:.2f} MiB')
    darts = [w for w in wheels if wheel_name(w) == 'darts_nb']
    stale = stale_files(darts[0]) if darts else []
    if stale:
        text = f'{darts[0].name} differs from the working tree in {stale[:5]}' + (' ...' if len(stale) > 5 else '')
        problems.append(text + ': rebuild it (python tools/gpu_wheels.py)')
    return problems, notes


def dry_run(plan: Plan) -> int:
    "Print every command the run would run and check the files it needs; 2 when one is missing, else 0."
    problems, notes = check_plan(plan)
    wheels = sorted(plan.wheels.glob('*.whl')) if plan.wheels.is_dir() else []
    env = {k: v for k, v in step_env(plan).items() if os.environ.get(k) != v}
    print(f'gpu_check --dry-run ({plan.mode}): out {plan.out}, work {plan.work}, budget {plan.budget:g} s')
    print('environment of every step: ' + ' '.join(f'{k}={shlex.quote(v)}' for k, v in sorted(env.items())))
    for name in plan.steps:
        print(f'[{name}] at most {LIMITS[plan.mode][name]} s, in {ROOT}:')
        print('  ' + shlex.join(step_command(plan, name, wheels)))
        if name in ('imports', 'generate'):
            print('  spec: ' + json.dumps(child_spec(plan, name, wheels)))
        if name == 'install':
            print("  (at run time, a wheel whose package the machine has, or not built for its Python, is left out)")
    for n in notes:
        print('note: ' + n)
    for p in problems:
        print('problem: ' + p)
    print('dry run: ' + ('ready' if not problems else f'{len(problems)} problem(s)'))
    return 2 if problems else 0


def run_all(plan: Plan, keep: bool) -> int:
    "Run the steps, writing each one's JSON as it ends and the summary after each; 0 when every step passed."
    started, deadline = time.time(), time.monotonic() + plan.budget
    for old in ('raw', 'logs'):
        shutil.rmtree(plan.out / old, ignore_errors=True)
    plan.out.mkdir(parents=True, exist_ok=True)
    plan.work.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still stops its step and writes the summary
    problems, notes = check_plan(plan)
    for line in [f'note: {n}' for n in notes] + [f'warning: {p}' for p in problems]:
        print(line, flush=True)
    install, records = install_plan(plan), []
    try:
        for name in plan.steps:
            print(f'[{name}] ...', flush=True)
            rec = run_step(plan, name, install=install, deadline=deadline, records=records)
            records.append(rec)
            write_json(plan.out / f'{name}.json', rec)
            write_summary(plan, records, started)
            print(f"[{name}] {rec['status']} in {rec['seconds']} s (limit {rec['limit_s']} s)", flush=True)
    finally:
        text = write_summary(plan, records, started)
        if not keep:
            shutil.rmtree(plan.work, ignore_errors=True)
    print('\n' + text)
    print(f'results in {plan.out}')
    return 0 if all(r['status'] == 'ok' for r in records) else 1


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument('--wheels', default=str(ROOT / 'gpu_wheels'), help='the carried wheels (tools/gpu_wheels.py)')
    ap.add_argument('--out', default=None, help='where the results go (default: $OUT if set, else gpu_results/)')
    ap.add_argument('--work', default=None, help='scratch folder (default: a new temporary one, removed after)')
    ap.add_argument('--dry-run', action='store_true', help='print the commands and check the files; run nothing')
    ap.add_argument('--tiny', action='store_true', help='the same steps at a tiny shape on the CPU')
    ap.add_argument('--only', nargs='+', choices=STEPS, default=None, help='run these steps only (in the usual order)')
    ap.add_argument('--budget', type=float, default=None, help='seconds for the whole run (default 570; tiny 400)')
    ap.add_argument('--keep', action='store_true', help='keep the work folder (the installed wheels)')
    ap.add_argument('--child', choices=sorted(CHILDREN), default=None, help=argparse.SUPPRESS)
    ap.add_argument('--spec', default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.budget is not None and a.budget <= 0:
        ap.error(f'--budget {a.budget:g}: expected a positive number of seconds')
    if a.child and not a.spec:
        ap.error(f'--child {a.child}: expected --spec FILE too')
    return a


def make_plan(a: argparse.Namespace) -> Plan:
    "The run's plan from its arguments (the work folder is made only for a real run)."
    mode = 'tiny' if a.tiny else 'full'
    out = Path(a.out or os.environ.get('OUT') or ROOT / 'gpu_results').absolute()
    if a.work:
        work = Path(a.work).absolute()
    elif a.dry_run:
        work = Path(tempfile.gettempdir()) / 'gpu-check-XXXXXXXX'
    else:
        work = Path(tempfile.mkdtemp(prefix='gpu-check-'))
    steps = tuple(s for s in STEPS if a.only is None or s in a.only)
    budget = a.budget or BUDGET[mode]
    return Plan(mode=mode, wheels=Path(a.wheels).absolute(), out=out, work=work, budget=budget, steps=steps)


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.child:
        return CHILDREN[a.child](json.loads(Path(a.spec).read_text()))
    plan = make_plan(a)
    if a.dry_run:
        return dry_run(plan)
    return run_all(plan, keep=a.keep)


if __name__ == '__main__':
    sys.exit(main())
