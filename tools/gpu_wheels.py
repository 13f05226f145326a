"""Build the folder of wheels that `tools/gpu_check.py` installs on a bare GPU machine (run it here, where pip reaches
PyPI); it prints every wheel's size and the total, and refuses when the total exceeds what may travel (64 MiB).

The GPU machine has Python 3.12 with a CUDA torch, transformers, peft, pandas, scipy, statsmodels and seaborn (and
what those need: numpy, huggingface_hub, tokenizers, safetensors, accelerate, pydantic, click, matplotlib, ...), and
no package registry. What it lacks travels as wheels, installed there with `pip install --no-index --no-deps`:

- NAMED: darts_nb itself (built from this working tree) and the four packages it needs that are not on the machine:
  fastcore (imported by every darts_nb module), mergekit (merges), lm-eval (evaluations) and datasets.
- DEPENDENCIES: what those four need beyond the machine's packages, each with the package that needs it. All but
  seven are pure Python (a few KB to 1.5 MB each); the seven binaries are small (0.1 to 9 MB, Python 3.12 builds).
- LEFT_OUT: pyarrow, the one dependency too large to travel (55 MB for Python 3.12, which with the rest exceeds 64
  MiB). Without it `import datasets` fails on the machine, and so do lm-eval's evaluations; the GPU check does not
  need either (its steps import darts_nb and fastcore), and its `imports` step reports which modules import there.

Versions are those of this environment (run it with the project's `.venv/bin/python`), so the machine runs what the
tests here ran; binaries are fetched for CPython 3.12 on manylinux x86_64 (`--python-version`); a package PyPI has
only as a source archive is built here, and must come out pure Python. The folder holds only `*.whl` files (git
ignores them, so it must be carried explicitly); it travels to the machine with the working tree.

The functions of the last part run on the GPU machine, for tools/gpu_check.py (this module imports only the standard
library): which wheels to install there (a package the machine has stays its own), whether darts_nb's wheel still
matches the working tree, and unpacking wheels where pip is missing.

    .venv/bin/python tools/gpu_wheels.py [--out gpu_wheels] [--python-version 3.12] [--limit-mib 64]
                                         [--drop NAME ...] [--add NAME[==VERSION] ...]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as metadata
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024**2
LIMIT_MIB = 64  # what may travel with the working tree
PYTHON_VERSION = '3.12'  # the GPU machine's Python
PLATFORMS = ('manylinux_2_28_x86_64', 'manylinux_2_17_x86_64', 'manylinux2014_x86_64', 'linux_x86_64')
NAMED = {
    'darts_nb': 'this project, built from the working tree',
    'fastcore': 'imported by every darts_nb module',
    'mergekit': 'the merges (darts_nb.merge)',
    'lm-eval': 'the evaluations (darts_nb.evaluate, darts lm-eval)',
    'datasets': "the evaluations' data (lm-eval, darts_nb.evaluate)",
}
# The dependencies of NAMED that the GPU machine lacks (its packages' own dependencies subtracted): name -> who needs it
DEPENDENCIES = {
    'absl-py': 'rouge-score',
    'certifi': 'requests',
    'chardet': 'mbstrdecoder',
    'charset-normalizer': 'requests (binary, 0.3 MB)',
    'cloudpickle': 'joblib',
    'colorama': 'sacrebleu',
    'dataproperty': 'pytablewriter, tabledata',
    'defusedxml': 'nltk',
    'dill': 'datasets, evaluate, lm-eval, multiprocess',
    'evaluate': 'lm-eval',
    'immutables': 'mergekit (binary, 0.1 MB)',
    'joblib': 'nltk, scikit-learn',
    'lxml': 'sacrebleu (binary, 5.3 MB)',
    'mbstrdecoder': 'dataproperty, pytablewriter, typepy',
    'more-itertools': 'lm-eval',
    'multiprocess': 'datasets, evaluate',
    'nltk': 'rouge-score',
    'pathvalidate': 'pytablewriter',
    'portalocker': 'sacrebleu',
    'protobuf': 'mergekit (binary, 0.3 MB)',
    'pytablewriter': 'lm-eval',
    'requests': 'evaluate',
    'rouge-score': 'lm-eval',
    'sacrebleu': 'lm-eval',
    'scikit-learn': 'lm-eval (binary, 9.2 MB)',
    'sentencepiece': 'mergekit (binary, 1.7 MB)',
    'sqlitedict': 'lm-eval',
    'tabledata': 'pytablewriter',
    'tabulate': 'sacrebleu',
    'tcolorpy': 'pytablewriter',
    'threadpoolctl': 'scikit-learn',
    'typepy': 'dataproperty, pytablewriter, tabledata',
    'urllib3': 'requests',
    'word2number': 'lm-eval',
    'xxhash': 'datasets, evaluate (binary, 0.5 MB)',
}
NAMED_WHEELS = tuple(n.replace('-', '_') for n in NAMED)  # as wheel file names spell them
LEFT_OUT = {
    'pyarrow': (
        'needed by datasets; its Python 3.12 wheel alone is 55 MB, over the limit with the rest: on the machine '
        '`import datasets` (and lm-eval evaluations) fail without it; the GPU check needs neither'
    ),
}


def pinned(name: str) -> str:
    "`name==VERSION` as this environment has it, or `name` alone when it is not installed here."
    try:
        return f'{name}=={metadata.version(name)}'
    except metadata.PackageNotFoundError:
        return name


def pip(args: list[str]) -> subprocess.CompletedProcess:
    "Run this Python's pip with `args`; its output is kept for the error message."
    cmd = [sys.executable, '-m', 'pip', *args]
    return subprocess.run(cmd, capture_output=True, text=True)


def platform_flags(python_version: str) -> list[str]:
    "pip's flags that fetch binaries for CPython `python_version` on manylinux x86_64."
    abi = 'cp' + python_version.replace('.', '')
    flags = ['--only-binary=:all:', '--python-version', python_version, '--implementation', 'cp', '--abi', abi]
    for p in PLATFORMS:
        flags += ['--platform', p]
    return flags


def fetch(spec: str, dest: Path, python_version: str) -> Path:
    "Download `spec`'s wheel for the GPU machine into `dest` (built here when PyPI has only its source); its path."
    before = set(dest.glob('*.whl'))
    r = pip(['download', '--no-deps', '-q', '-d', str(dest), *platform_flags(python_version), spec])
    if r.returncode != 0:
        r = pip(['wheel', '--no-deps', '-q', '-w', str(dest), spec])
        if r.returncode != 0:
            raise SystemExit(
                f'{spec}: neither a wheel for Python {python_version} nor a build here:\n{r.stderr[-2000:]}'
            )
    new = sorted(set(dest.glob('*.whl')) - before)
    if len(new) != 1:
        raise SystemExit(f'{spec}: expected one new wheel in {dest}, got {[p.name for p in new]}')
    pure = new[0].name.endswith('-none-any.whl')
    if not pure and python_version.replace('.', '') not in new[0].name and 'abi3' not in new[0].name:
        raise SystemExit(f'{spec}: got {new[0].name}, expected a pure-Python wheel or one for Python {python_version}')
    return new[0]


def build_darts(dest: Path) -> Path:
    "darts_nb's wheel, built from a copy of this working tree (the build leaves the checkout untouched); its path."
    with tempfile.TemporaryDirectory(prefix='darts-wheel-') as d:
        src = Path(d) / 'src'
        src.mkdir()
        for name in ('pyproject.toml', 'README.md'):
            shutil.copy2(ROOT / name, src / name)
        shutil.copytree(ROOT / 'darts_nb', src / 'darts_nb', ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))
        before = set(dest.glob('*.whl'))
        r = pip(['wheel', '--no-deps', '--no-build-isolation', '-q', '-w', str(dest), str(src)])
        if r.returncode != 0:
            raise SystemExit(f'darts_nb: the wheel did not build:\n{r.stdout[-2000:]}{r.stderr[-2000:]}')
    new = sorted(set(dest.glob('darts_nb-*.whl')) - before)
    if len(new) != 1:
        raise SystemExit(f'darts_nb: expected one new wheel in {dest}, got {[p.name for p in new]}')
    return new[0]


def wanted(drop: list[str], add: list[str]) -> list[str]:
    "The pinned specs to fetch (darts_nb aside): NAMED and DEPENDENCIES less `drop`, plus `add`."
    unknown = [n for n in drop if n not in NAMED and n not in DEPENDENCIES]
    if unknown:
        known = ', '.join([*NAMED, *DEPENDENCIES])
        raise SystemExit(f'--drop {" ".join(unknown)}: not in the list; expected some of {known}')
    names = [n for n in [*NAMED, *DEPENDENCIES] if n != 'darts_nb']
    specs = [pinned(n) for n in names if n not in drop]
    return specs + [a if re.search(r'[=<>]', a) else pinned(a) for a in add]


def report(wheels: list[Path], limit_mib: float) -> int:
    "Print each wheel's size and the total; the total in bytes."
    total = 0
    for w in sorted(wheels, key=lambda p: p.stat().st_size, reverse=True):
        size = w.stat().st_size
        total += size
        print(f'{size / MIB:8.2f} MiB  {w.name}')
    print(f'{total / MIB:8.2f} MiB  in all, {len(wheels)} wheels (limit {limit_mib:g} MiB)')
    return total


# ---------------------------------------------------------------- on the GPU machine (tools/gpu_check.py)
def wheel_name(wheel: Path) -> str:
    "The distribution a wheel file holds, as its file name spells it (`lm_eval`, `scikit_learn`)."
    return wheel.name.split('-')[0].lower()


def installed_version(name: str) -> str | None:
    "The version of distribution `name` in this Python, or None."
    for n in (name, name.replace('_', '-')):
        try:
            return metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
    return None


def supported(wheel: Path) -> bool:
    "Whether this Python can install `wheel` (its tags against packaging's; True when packaging is missing)."
    try:
        from packaging.tags import parse_tag, sys_tags
    except ImportError:
        return True
    tag = '-'.join(wheel.name[: -len('.whl')].split('-')[-3:])
    return not parse_tag(tag).isdisjoint(set(sys_tags()))


def choose_wheels(wheels: list[Path]) -> tuple[list[Path], dict]:
    "(wheels to install, {wheel: why not}): the machine's own packages stay theirs; NAMED_WHEELS always install."
    chosen, left = [], {}
    for w in wheels:
        have = installed_version(wheel_name(w))
        if not supported(w):
            left[w.name] = f'not built for Python {sys.version_info.major}.{sys.version_info.minor} on this platform'
        elif have is not None and wheel_name(w) not in NAMED_WHEELS:
            left[w.name] = f'already installed here ({wheel_name(w)} {have})'
        else:
            chosen.append(w)
    return chosen, left


def stale_files(wheel: Path) -> list[str]:
    "darts_nb's .py files whose text differs between the working tree and `wheel` (or that only one of them has)."
    with zipfile.ZipFile(wheel) as z:
        packed = {n: hashlib.sha256(z.read(n)).hexdigest() for n in z.namelist() if n.startswith('darts_nb/')}
    packed = {n: h for n, h in packed.items() if n.endswith('.py')}
    tree = {
        p.relative_to(ROOT).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (ROOT / 'darts_nb').rglob('*.py')
        if '__pycache__' not in p.parts
    }
    return sorted(n for n in set(packed) | set(tree) if packed.get(n) != tree.get(n))


def unpack_wheels(wheels: list[str], target: Path) -> list[str]:
    "Unpack `wheels` into `target` as pip would for pure and platform libraries (its fallback); their names."
    for w in wheels:
        with zipfile.ZipFile(w) as z:
            for info in z.infolist():
                parts = info.filename.split('/')
                if parts[0].endswith('.data'):
                    if len(parts) < 3 or parts[1] not in ('purelib', 'platlib'):
                        continue  # scripts and headers: not needed to import
                    parts = parts[2:]
                if info.is_dir() or not parts[-1]:
                    continue
                dest = target.joinpath(*parts)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(z.read(info))
    return [Path(w).name for w in wheels]


def over_limit(total: int, limit_mib: float, out: Path) -> str | None:
    "The error to print when `total` bytes of wheels in `out` exceed `limit_mib`, else None."
    if total <= limit_mib * MIB:
        return None
    return (
        f'error: {out}: {total / MIB:.2f} MiB of wheels, over --limit-mib {limit_mib:g}: they cannot travel with the '
        'working tree; --drop some packages (the largest are listed first)'
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--out', default=str(ROOT / 'gpu_wheels'), help='the wheel folder (its *.whl are replaced)')
    ap.add_argument('--python-version', default=PYTHON_VERSION, help="the GPU machine's Python (default 3.12)")
    ap.add_argument('--limit-mib', type=float, default=LIMIT_MIB, help='refuse above this total (default 64)')
    ap.add_argument('--drop', nargs='*', default=[], help='leave these packages out (names as in the list)')
    ap.add_argument('--add', nargs='*', default=[], help='more packages, NAME or NAME==VERSION (e.g. pyarrow)')
    a = ap.parse_args(argv)
    if not re.fullmatch(r'3\.\d+', a.python_version):
        ap.error(f'--python-version {a.python_version}: expected 3.N, e.g. 3.12')
    specs = wanted(a.drop, a.add)  # a bad --drop stops here, before the folder is emptied
    out = Path(a.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob('*.whl'):
        old.unlink()
    wheels = [] if 'darts_nb' in a.drop else [build_darts(out)]
    for spec in specs:
        wheels.append(fetch(spec, out, a.python_version))
        print(f'fetched {wheels[-1].name}', flush=True)
    total = report(wheels, a.limit_mib)
    for name, why in LEFT_OUT.items():
        if name not in ' '.join(a.add):
            print(f'left out: {name} ({why})')
    if error := over_limit(total, limit_mib=a.limit_mib, out=out):
        print(error, file=sys.stderr)
        return 2
    print(f'ready: carry {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out} to the GPU machine')
    return 0


if __name__ == '__main__':
    sys.exit(main())
