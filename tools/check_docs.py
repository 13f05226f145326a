"""Check the docs build without quarto: nbdev's pre-processing of every notebook must succeed.

`nbdev-docs` first processes each notebook (nbdev's `_pre_docs` in nbdev/quarto.py, then `proc_nbs` in
nbdev/serve.py), then hands the result to quarto. Processing *executes* every exported cell and every
cell that contains an import (nbdev's `exec_show_docs`), in a fresh kernel and without the other cells,
so a lesson cell that mixes an import with code that needs earlier cells fails the docs build, and one
that builds a zoo or trains makes it slow. This script runs the same steps minus the ones that need or
install quarto, or rewrite committed files:

- `_ensure_quarto` is skipped (it would try to install quarto with sudo);
- `refresh_quarto_yml` is replaced by a check: nbs/_quarto.yml exists and nbs/nbdev.yml is exactly what it would
  write from pyproject.toml, so `make docs` leaves the committed file alone;
- `nbdev_sidebar` is replaced by a check: `custom_sidebar = true` and nbs/sidebar.yml lists exactly
  nbs/*.ipynb (index first, then sorted), in the format nbdev writes, so a new notebook cannot be forgotten;
- `_build_modidx` runs, and fails the check if it changed darts_nb/_modidx.py (run nbdev-export and commit);
- cells that processing executes, other than exported ones, must contain nothing but imports;
- `proc_nbs` processes every notebook afresh into _proc/; a notebook whose processing raises is reported
  with the error (nbdev's message names the cell), and the script exits 1.

usage: python tools/check_docs.py [--n-workers N] [--skip NAME.ipynb ...]
(--skip is for local debugging only; `make check-docs` checks every notebook)."""

import argparse
import ast
import importlib
import os
import sys
import time
import traceback
import warnings
from pathlib import Path

SHOW_DIRS = {'export', 'exports', 'exporti', 'exec_doc'}  # cells nbdev executes because they are exported


def _proc_one(o):
    "Process one notebook as `proc_nbs` does (nbdev.serve_drv.main); return (src, seconds, error or None)."
    import nbdev.serve_drv

    t0 = time.time()
    try:
        nbdev.serve_drv.main(o)
    except BaseException as e:  # nbdev's message names the cell and quotes it; anything else gets its traceback
        msg = f'{type(e).__name__}: {e}'
        if ' in cell ' not in str(e):
            msg += '\n' + ''.join(traceback.format_exception(e)[-4:])
        return str(o[0]), time.time() - t0, msg
    return str(o[0]), time.time() - t0, None


def source_cell(nb: Path, err: str) -> str:
    "Which cell of the source notebook `err` quotes: nbdev's cell number counts the cells it adds (show_doc)."
    import json

    for i, c in enumerate(json.loads(nb.read_text())['cells']):
        body = '\n'.join(line for line in ''.join(c['source']).splitlines() if not line.startswith('#|')).strip()
        if c['cell_type'] == 'code' and body and f':\n{body}\n' in err:
            return f' (cell {i} of {nb.name}, id {c.get("id")})'
    return ''


def check_sidebar(cfg, path: Path) -> list[str]:
    "nbs/sidebar.yml is hand-written (custom_sidebar = true) and lists every notebook, index first, then sorted."
    import yaml
    from nbdev.quarto import IndentDumper

    errs = []
    if not cfg.custom_sidebar:
        errs.append('pyproject.toml [tool.nbdev]: set custom_sidebar = true (nbs/sidebar.yml is hand-written)')
    nbs = sorted((p.name for p in path.glob('*.ipynb')), key=lambda n: (n != 'index.ipynb', n))
    want = yaml.dump({'website': {'sidebar': {'contents': nbs}}}, Dumper=IndentDumper, sort_keys=False)
    f = path / 'sidebar.yml'
    have = f.read_text() if f.exists() else None
    if have != want:
        listed = []
        try:
            listed = (yaml.safe_load(have) or {})['website']['sidebar']['contents']
        except Exception:
            pass
        missing, extra = sorted(set(nbs) - set(map(str, listed))), sorted(set(map(str, listed)) - set(nbs))
        errs.append(
            f'{f.relative_to(cfg.config_path)} must list exactly the notebooks, index.ipynb first, then in sorted order'
            + (f'; missing: {missing}' if missing else '')
            + (f'; not a notebook: {extra}' if extra else '')
            + f'. Expected:\n{want}'
        )
    return errs


def check_nbdev_yml(cfg, path: Path) -> list[str]:
    "nbs/nbdev.yml is what nbdev's `refresh_quarto_yml` would write (it rewrites the file on every docs build)."
    from nbdev.quarto import _nbdev_yml

    vals = {k: cfg[k] for k in ['title', 'description', 'branch', 'git_url', 'doc_host', 'doc_baseurl']}
    vals['doc_path'] = cfg.doc_path.name
    want, f = _nbdev_yml.format(**vals), path / 'nbdev.yml'
    if f.exists() and f.read_text() != want:
        return [
            f'{f.relative_to(cfg.config_path)} differs from what nbdev-docs writes from pyproject.toml; '
            f'expected:\n{want}'
        ]
    return []


def check_eval_cells(path: Path, skip) -> list[str]:
    "Non-exported cells that docs processing executes (they contain an import) must contain only imports."
    from nbdev.processors import _do_eval
    from nbdev.process import NBProcessor

    errs = []
    warnings.filterwarnings('ignore', 'Found cells containing imports and other code')  # reported below, by cell
    for f in sorted(path.glob('*.ipynb')):
        if f.name in skip:
            continue
        for i, c in enumerate(NBProcessor(f, procs=[]).nb.cells):
            if c.cell_type != 'code' or not _do_eval(c) or (c.directives_.keys() & SHOW_DIRS):
                continue
            if all(isinstance(t, (ast.Import, ast.ImportFrom)) for t in c.parsed_()):
                continue
            first = next((line for line in c.source.splitlines() if not line.startswith('#|')), '')
            errs.append(
                f'{f.relative_to(path.parent)} cell {i}: the docs build executes this cell on its own because it '
                f'contains an import; move its imports into an import-only cell ({first[:80]!r} ...)'
            )
    return errs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--n-workers', type=int, default=2, help='processes (at most 2)')
    ap.add_argument('--skip', nargs='*', default=[], help='notebook file names not to process (local debugging only)')
    a = ap.parse_args(argv)
    t0 = time.time()
    from nbdev.config import get_config
    from nbdev.quarto import _chk_nbdev_yml
    from nbdev.serve import proc_nbs
    import nbdev.serve
    import nbdev.doclinks

    cfg = get_config()
    os.chdir(cfg.config_path)  # as _pre_docs: processing workers call get_config() from the cwd
    path = cfg.nbs_path
    skip = set(a.skip)
    errs = []
    try:
        _chk_nbdev_yml(path)
    except FileNotFoundError as e:
        errs.append(str(e))
    if not (path / '_quarto.yml').exists():
        errs.append(f'{path / "_quarto.yml"} not found')
    errs += check_nbdev_yml(cfg, path)
    errs += check_sidebar(cfg, path)
    errs += check_eval_cells(path, skip)

    modidx = cfg.lib_path / '_modidx.py'
    before = modidx.read_bytes() if modidx.exists() else None
    nbdev.doclinks._build_modidx()
    if (modidx.read_bytes() if modidx.exists() else None) != before:
        errs.append(
            f'{modidx.relative_to(cfg.config_path)} was out of date (nbdev rebuilt it): run nbdev-export and commit it'
        )

    results = []

    def _parallel(f, items, *args, n_workers=2, **kw):  # proc_nbs' own pool, with per-notebook errors and times
        from fastcore.parallel import parallel

        items = [o for o in items if Path(o[0]).name not in skip]
        print(f'processing {len(items)} notebooks with {n_workers} workers ...', flush=True)
        # by module name, not as __main__._proc_one: the IPython kernel that processing starts in a worker
        # replaces the worker's __main__, so later tasks could not unpickle a function of this script's __main__
        worker = importlib.import_module(Path(__file__).stem)._proc_one
        results.extend(parallel(worker, items, *args, n_workers=n_workers, **kw))

    nbdev.serve.parallel = _parallel
    cache = proc_nbs(path, n_workers=max(1, min(a.n_workers, 2)), force=True)

    for src, secs, err in sorted(results, key=lambda r: -r[1]):
        print(f'  {secs:6.1f} s  {Path(src).relative_to(cfg.config_path)}' + ('  FAILED' if err else ''))
    for src, secs, err in results:
        if err:
            errs.append(
                f'{Path(src).relative_to(cfg.config_path)}: docs processing failed{source_cell(Path(src), err)}:\n{err}'
            )
    if skip:
        print(f'skipped (not processed, not checked): {sorted(skip)}')
    took = time.time() - t0
    if errs:
        print(f'\nFAIL: docs check found {len(errs)} problem(s) in {took:.0f} s:', file=sys.stderr)
        for e in errs:
            print(f'\n- {e}', file=sys.stderr)
        return 1
    print(
        f'docs check passed: {len(results)} notebooks processed into {cache.relative_to(cfg.config_path)}/ '
        f'in {took:.0f} s'
    )
    return 0


if __name__ == '__main__':
    sys.exit(main())
