"""tools/gpu_check.py, the prepared GPU check, rehearsed on the CPU: `--dry-run` prints every command and refuses
when a file it needs is missing (or the darts_nb wheel is stale, or the wheels are over 64 MiB), and `--tiny` runs
every step at a tiny shape and writes one JSON per step and a summary with sensible numbers.

The wheels here are made by hand (building the real ones needs PyPI: tools/gpu_wheels.py): for the dry run, wheels
named as the real ones (darts_nb's holding this tree's modules), and for the tiny run one small probe package, which
must come out installed in the run's own folder and imported from there."""

import base64
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'tools'))
import gpu_check  # noqa: E402
import gpu_wheels  # noqa: E402

ENV = {**os.environ, 'HF_HUB_OFFLINE': '1', 'HF_DATASETS_OFFLINE': '1', 'TOKENIZERS_PARALLELISM': 'false'}


def make_wheel(folder: Path, name: str, files: dict) -> Path:
    "A pure-Python wheel of distribution `name` 0.1 holding `files` (path -> bytes), with its dist-info."
    info = f'{name}-0.1.dist-info'
    files = {
        **files,
        f'{info}/METADATA': f'Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n'.encode(),
        f'{info}/WHEEL': b'Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n',
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()
        record.append(f'{path},sha256={digest},{len(data)}')
    record.append(f'{info}/RECORD,,')
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f'{name}-0.1-py3-none-any.whl'
    with zipfile.ZipFile(wheel, 'w') as z:
        for path, data in files.items():
            z.writestr(path, data)
        z.writestr(f'{info}/RECORD', '\n'.join(record) + '\n')
    return wheel


def named_wheels(folder: Path) -> Path:
    "Wheels named as gpu_wheels.py's NAMED ones; darts_nb's holds the working tree's modules (so it is not stale)."
    tree = {p.relative_to(ROOT).as_posix(): p.read_bytes() for p in (ROOT / 'darts_nb').glob('*.py')}
    make_wheel(folder, 'darts_nb', tree)
    for name in gpu_check.NAMED_WHEELS[1:]:
        make_wheel(folder, name, {f'{name}/__init__.py': b''})
    return folder


def dry_run(tmp_path, wheels, extra=()):
    "tools/gpu_check.py --dry-run with these wheels (and `extra` arguments); the finished process."
    cmd = [sys.executable, 'tools/gpu_check.py', '--dry-run', '--wheels', str(wheels), '--out', str(tmp_path / 'out')]
    return subprocess.run([*cmd, *extra], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=60)


def test_dry_run_prints_every_command(tmp_path):
    r = dry_run(tmp_path, named_wheels(tmp_path / 'wheels'))
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert 'pip install --no-index --no-deps --upgrade --no-compile' in out
    work = Path(tempfile.gettempdir()) / 'gpu-check-XXXXXXXX'  # the system's temporary folder (make test: a worker's)
    assert f'--target {work}' in out
    assert all(f'/wheels/{n}-0.1-py3-none-any.whl' in out for n in gpu_check.NAMED_WHEELS)
    assert 'tools/gpu_check.py --child imports --spec' in out
    assert 'tools/gpu_check.py --child generate --spec' in out
    assert '"hidden_size": 4096, "num_hidden_layers": 32' in out
    assert '"batch": 16, "prompt_len": 128, "new_tokens": 128' in out
    assert f'bench/bench_table8.py --device cuda --out {tmp_path}/out/raw/table8 --workdir' in out
    assert f'bench/bench_cache_memory.py --shape llama2-7b --device cuda --out {tmp_path}/out/raw/cache' in out
    assert f'PYTHONPATH={work}/site' in out
    assert 'OMP_NUM_THREADS' not in out  # the GPU run keeps the machine's threads
    assert 'dry run: ready' in out
    assert not (tmp_path / 'out').exists()  # nothing ran


def test_dry_run_tiny_runs_on_the_cpu(tmp_path):
    r = dry_run(tmp_path, named_wheels(tmp_path / 'wheels'), extra=['--tiny', '--only', 'generate', 'table8'])
    assert r.returncode == 0, r.stdout + r.stderr
    assert 'bench/bench_table8.py --device cpu --tiny' in r.stdout
    assert '"device": "cpu"' in r.stdout
    assert 'OMP_NUM_THREADS=1' in r.stdout
    assert '[install]' not in r.stdout
    assert 'bench_cache_memory' not in r.stdout


def test_dry_run_refuses_missing_or_stale_or_large_wheels(tmp_path):
    r = dry_run(tmp_path, tmp_path / 'nowhere')
    assert r.returncode == 2
    assert f'missing: --wheels {tmp_path}/nowhere' in r.stdout
    wheels = named_wheels(tmp_path / 'wheels')
    darts = wheels / 'darts_nb-0.1-py3-none-any.whl'
    with zipfile.ZipFile(darts) as z:
        files = {n: z.read(n) for n in z.namelist() if n.startswith('darts_nb/')}
    files['darts_nb/cost.py'] += b'# changed since the wheel was built\n'
    make_wheel(wheels, 'darts_nb', files)  # replaces it: the tree's modules, one of them changed
    r = dry_run(tmp_path, wheels)
    assert r.returncode == 2
    assert 'differs from the working tree' in r.stdout
    assert 'darts_nb/cost.py' in r.stdout
    darts.unlink()
    with open(wheels / 'big-0.1-py3-none-any.whl', 'wb') as f:
        f.truncate(65 * 1024**2)  # sparse: the size counts, not the disk
    r = dry_run(tmp_path, wheels)
    assert r.returncode == 2
    assert 'missing in' in r.stdout
    assert 'darts_nb' in r.stdout
    assert 'over the 64 MiB that travel' in r.stdout


def test_unpack_wheels_without_pip(tmp_path):
    "The fallback where the machine has no pip: a wheel's files land in the target, importable."
    wheel = make_wheel(tmp_path / 'wheels', 'probe_pkg', {'probe_pkg/__init__.py': b'VALUE = 7\n'})
    assert gpu_wheels.unpack_wheels([str(wheel)], tmp_path / 'site') == [wheel.name]
    assert (tmp_path / 'site' / 'probe_pkg' / '__init__.py').read_text() == 'VALUE = 7\n'
    assert gpu_check.installed_modules(tmp_path / 'site') == ['probe_pkg']


def test_gpu_wheels_refuses_over_the_limit():
    assert gpu_wheels.over_limit(64 * 1024**2, limit_mib=64, out=Path('w')) is None
    err = gpu_wheels.over_limit(64 * 1024**2 + 1, limit_mib=64, out=Path('w'))
    assert 'over --limit-mib 64' in err
    with pytest.raises(SystemExit, match='--drop nope: not in the list'):
        gpu_wheels.wanted(['nope'], [])
    assert 'pyarrow' not in gpu_wheels.DEPENDENCIES  # too large to travel: listed as left out
    assert set(gpu_wheels.NAMED) == {'darts_nb', 'fastcore', 'mergekit', 'lm-eval', 'datasets'}


def read(out: Path, name: str) -> dict:
    return json.loads((out / name).read_text())


def test_tiny_run_writes_every_step(tmp_path):
    wheels = tmp_path / 'wheels'
    make_wheel(wheels, 'gpu_check_probe', {'gpu_check_probe/__init__.py': b'HERE = True\n'})
    out, work = tmp_path / 'out', tmp_path / 'work'
    cmd = [sys.executable, 'tools/gpu_check.py', '--tiny', '--wheels', str(wheels), '--out', str(out)]
    r = subprocess.run([*cmd, '--work', str(work)], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    summary = read(out, 'summary.json')
    assert summary['mode'] == 'tiny'
    assert list(summary['steps']) == list(gpu_check.STEPS)
    assert all(s['status'] == 'ok' and 0 < s['seconds'] <= s['limit_s'] for s in summary['steps'].values())
    assert summary['device'].startswith('CPU')
    assert not work.exists()  # removed without --keep
    install = read(out, 'install.json')['result']
    assert install['wheels'] == ['gpu_check_probe-0.1-py3-none-any.whl']
    imports = read(out, 'imports.json')['result']
    assert imports['required_ok'] and imports['done']
    assert imports['modules']['gpu_check_probe']['origin'] == str(work / 'site' / 'gpu_check_probe' / '__init__.py')
    gen = read(out, 'generate.json')['result']
    assert gen['tokens_per_s'] > 0
    assert gen['decode_tokens_per_s'] is None or gen['decode_tokens_per_s'] > 0
    assert (gen['batch'], gen['prompt_len'], gen['new_tokens'], len(gen['seconds'])) == (4, 16, 16, 3)
    assert gen['config']['vocab_size'] == 32000
    t8 = read(out, 'table8.json')['result']
    totals = {m['kind']: m['value'] for m in t8['measured'] if m['phase'] == 'total'}
    assert set(totals) == {'standard', 'position'} and min(totals.values()) > 0
    assert all(g['plain'] > 0 and g['ratio'] > 0 for g in t8['generate'].values())
    assert (out / 'raw' / 'table8' / 'table8.csv').exists()
    cm = read(out, 'cache_memory.json')['result']
    assert set(cm['peaks']) == {'side-by-side', 'one-at-a-time', 'calibration'}
    assert all(p['peak_gb'] > 0 for p in cm['peaks'].values())
    assert cm['caches']['identical']
    head = summary['headline']
    assert head['generate_tokens_per_s'] > 0 and head['cache_memory_ratio'] > 0
    md = (out / 'summary.md').read_text()
    assert '| phase | Standard | DARTS | Standard (paper) | DARTS (paper) |' in md
    assert '| total wall-clock |' in md and 'tokens/s' in md
    assert all((out / 'logs' / f'{s}.log').exists() for s in gpu_check.STEPS)
