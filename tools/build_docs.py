"""Build the docs site: every notebook executed, processed by nbdev, rendered by MkDocs Material (no quarto).

This is the site readers open: `.github/workflows/deploy.yaml` builds it (`make docs-check`), checks it in headless
Chromium (tools/check_site.py) and publishes exactly that _docs/ folder to GitHub Pages. Quarto cannot be installed
on machines without internet (its PyPI package downloads the binary), and nbdev-docs does not execute the lessons, so
the site is built from the same notebooks with MkDocs Material and mkdocs-jupyter (pure Python, maintained, a theme
and a notebook renderer that many projects use). Where quarto is installed, `make docs` runs nbdev-docs for a local
preview; that site is not the one published.

1. **Execute** a copy of every notebook (build/docs/exec) as nbdev-test does (cells flagged slow, cuda or notest are
   skipped), saving the outputs: the pages show the lessons' tables and figures from a real run on the ci zoo
   ($DARTS_HOME, built by `make zoo-ci`). Outputs are made at build time rather than committed, so they always
   match the code and the notebooks stay clean in git.
2. **Process** each executed notebook with nbdev's own docs processors (the ones `nbdev-docs` runs before quarto):
   `show_doc` signatures with their docments tables for exported functions, `#| hide` cells removed, directives
   stripped, links to the API. The title cell becomes the page's heading; links to the published site
   (doc_host/doc_baseurl) become relative, so the local site is self-contained.
3. **Render** with MkDocs Material (mkdocs-jupyter for the notebooks) into _docs/, one page per notebook named as
   nbdev names them (`04_surgery.ipynb` -> `surgery.html`), the navigation in sidebar.yml's order, index.ipynb as
   the home page.

usage: python tools/build_docs.py [--n-workers N] [--only NAME.ipynb ...] [--no-exec]
(--only and --no-exec are for local iteration; `make docs-site` builds everything. tools/check_site.py fails on a
partial site, and on a page whose lessons were not executed from the current notebook: --no-exec where no executed
copy exists or the notebook changed since)."""

import argparse
import importlib
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / 'build' / 'docs'
SITE = ROOT / '_docs'


def page_name(nb: str) -> str:
    "nbdev's page name for a notebook: the numeric prefix dropped (`04_surgery.ipynb` -> `surgery`)."
    return re.sub(r'^\d+[a-z]?_', '', Path(nb).stem)


def notebooks() -> list[str]:
    "The notebooks in sidebar order (index first)."
    import yaml

    return yaml.safe_load((ROOT / 'nbs' / 'sidebar.yml').read_text())['website']['sidebar']['contents']


def _execute(name: str, where: Path = BUILD / 'exec') -> tuple:
    "Run one copied notebook (in `where`) as nbdev-test does and save its outputs; (name, ok, seconds)."
    from nbdev.test import test_nb
    from nbdev.config import get_config

    flags = get_config().tst_flags.split()
    ok, secs = test_nb(
        where / name, skip_flags=flags, save=True, showerr=True, basepath=ROOT, cell_timeout=1800
    )  # a loaded machine
    return name, ok, secs


def execute(names: list[str], n_workers: int) -> list[str]:
    "Execute copies of `names`; returns the ones that failed."
    from fastcore.parallel import parallel

    d = BUILD / 'exec'
    if d.exists():
        shutil.rmtree(d)
    shutil.copytree(ROOT / 'nbs', d, ignore=shutil.ignore_patterns('.*', '_*'))
    # by module name, not as __main__._execute: the IPython shell that executes a notebook in a worker replaces the
    # worker's __main__, so later tasks could not unpickle a function of this script's __main__ (as tools/check_docs.py)
    worker = importlib.import_module(Path(__file__).stem)._execute
    res = parallel(worker, names, n_workers=n_workers, method='spawn', pause=0.01)
    for name, ok, secs in sorted(res, key=lambda r: -r[2]):
        print(f'  {secs:6.1f} s  {name}' + ('' if ok else '  FAILED'))
    return [n for n, ok, _ in res if not ok]


def unexecuted(names: list[str]) -> list[str]:
    """For `--no-exec`: the notebooks of `names` that have no executed copy from an earlier build, copied as they are
    (without outputs: the pages show code without results, and `tools/check_site.py` fails on them)."""
    d = BUILD / 'exec'
    d.mkdir(parents=True, exist_ok=True)
    missing = [n for n in names if not (d / n).exists()]
    for n in missing:
        shutil.copy(ROOT / 'nbs' / n, d / n)
    if missing:
        print(f'--no-exec: {len(missing)} notebook(s) without an executed copy are rendered without outputs: {missing}')
    return missing


def _front(nb: dict) -> tuple[str, str]:
    "Title and description from the first markdown cell (`# title` and `> description`)."
    for c in nb['cells']:
        if c['cell_type'] == 'markdown':
            src = ''.join(c['source'])
            t = re.search(r'^#\s+(.+)$', src, re.M)
            d = re.search(r'^>\s*(.+)$', src, re.M)
            return (t.group(1).strip() if t else ''), (d.group(1).strip() if d else '')
    return '', ''


KEYS = dict(
    code={'cell_type', 'id', 'metadata', 'source', 'outputs', 'execution_count'},
    markdown={'cell_type', 'id', 'metadata', 'source', 'attachments'},
)


def _for_mkdocs(c: dict, i: int) -> dict:
    "A processed cell as nbformat wants it (nbdev adds keys of its own); `#| echo: false` hides the source."
    src = ''.join(c['source']) if isinstance(c['source'], list) else c['source']
    lines = src.splitlines()
    hide_src = any(re.match(r'#\|\s*echo:\s*false', line) for line in lines)
    c = {k: v for k, v in c.items() if k in KEYS[c['cell_type']]}
    c['source'] = '\n'.join(line for line in lines if not line.startswith('#|')).strip('\n')
    c.setdefault('id', f'cell{i}')
    c['metadata'] = {'tags': ['hide_input']} if hide_src else {}  # execnb's timings are not valid nbformat metadata
    return c


def _map_text(c: dict, f) -> None:
    "Apply `f` to a cell's source and to the text of its markdown and HTML outputs, in place."

    def join(v):
        return ''.join(v) if isinstance(v, list) else v

    c['source'] = f(join(c['source']))
    for o in c.get('outputs', []):
        for k in ('text/markdown', 'text/html'):
            if k in o.get('data', {}):
                o['data'][k] = f(join(o['data'][k]))


def _local_links(t: str, doc_url: str) -> str:
    "Links to the published site made relative and fitted to MkDocs (`_anchor`), without show_doc's pandoc attributes."
    t = t.replace(doc_url, '')
    t = re.sub(r'\{target="_blank" style="[^"]*"\}', '', t)
    # headings: plain text, so that the table of contents' anchors (MkDocs drops code spans) are the headings' ids
    # (nbconvert keeps their text)
    t = re.sub(r'(?m)^(#+ .*)$', lambda m: re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', m.group(1)).replace('`', ''), t)
    return re.sub(r'\[([^\]\n]*)\]\(([\w-]+\.html)#([\w.]+)\)', _anchor, t)


def _anchor(m) -> str:
    """A link nbdev made to a documented name, for MkDocs' heading ids (`Class.method` is `classmethod` there).

    A private name has no heading, so it gets no link."""
    text, page, anchor = m.groups()
    return text if anchor.startswith('_') else f'[{text}]({page}#{anchor.replace(".", "")})'


def process(name: str, src_dir: Path, out_dir: Path, doc_url: str) -> Path:
    "nbdev's docs processing of one notebook, made ready for MkDocs: a heading instead of front matter, relative links."
    import nbdev.serve_drv
    from nbdev.serve import FilterDefaults

    title, desc = _front(json.loads((src_dir / name).read_text()))
    tmp = out_dir / f'.{name}'
    cwd = os.getcwd()
    os.chdir(ROOT)  # processing reads pyproject.toml from the cwd
    try:
        nbdev.serve_drv.main((src_dir / name, tmp, FilterDefaults))
    finally:
        os.chdir(cwd)
    nb = json.loads(tmp.read_text())
    tmp.unlink()
    cells = [
        _for_mkdocs(c, i) for i, c in enumerate(nb['cells']) if c['cell_type'] != 'raw'
    ]  # raw: the front matter quarto reads
    head = f'# {title}\n\n' + (f'> {desc}\n' if desc else '')
    cells.insert(0, dict(cell_type='markdown', id='title', metadata={}, source=head))
    for c in cells:
        _map_text(c, lambda t: _local_links(t, doc_url))
    dst = out_dir / f'{page_name(name)}.ipynb'
    dst.write_text(json.dumps({**nb, 'cells': cells}, indent=1))
    return dst


EXTRA_CSS = '''/* notebook pages read like nbdev's: no In/Out prompts, the source link to the right */
.jp-InputPrompt, .jp-OutputPrompt { display: none !important; }
.jp-Cell { padding-left: 0 !important; }
'''


def mkdocs_yml(names: list[str], site_url: str = None) -> str:
    """The MkDocs configuration: Material, no external fonts, notebooks rendered without executing, nbdev's page names;
    `site_url` is where GitHub Pages publishes it (canonical links, the sitemap, the 404 page's assets)."""
    import yaml

    nav = [{('Home' if n == 'index.ipynb' else page_name(n)): f'{page_name(n)}.ipynb'} for n in names]
    cfg = dict(
        site_name='darts_nb',
        site_url=site_url,
        site_description='DARTS: representation surgery for merged LLMs',
        docs_dir=str(BUILD / 'src'),
        site_dir=str(SITE),
        use_directory_urls=False,
        nav=nav,
        theme=dict(name='material', font=False, features=['navigation.top', 'toc.follow']),
        plugins=[
            'search',
            {
                'mkdocs-jupyter': dict(
                    execute=False,
                    include_source=True,
                    ignore_h1_titles=True,
                    remove_tag_config=dict(remove_input_tags=['hide_input']),
                )
            },
        ],
        markdown_extensions=['tables', 'admonition', 'attr_list'],
        extra_css=['extra.css'],
    )
    return yaml.safe_dump(cfg, sort_keys=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--n-workers', type=int, default=2)
    ap.add_argument(
        '--only', nargs='*', default=None, help='notebook file names (local iteration; the site is partial)'
    )
    ap.add_argument(
        '--no-exec',
        action='store_true',
        help='reuse build/docs/exec from the last build, the other notebooks without outputs (local iteration)',
    )
    a = ap.parse_args(argv)
    t0 = time.time()
    from nbdev.config import get_config

    cfg = get_config()
    names = [n for n in notebooks() if a.only is None or n in a.only]
    if a.no_exec:
        unexecuted(names)
    else:
        print(
            f'executing {len(names)} notebooks (DARTS_HOME={os.environ.get("DARTS_HOME", "~/.cache/darts_nb")}) ...',
            flush=True,
        )
        failed = execute(names, a.n_workers)
        if failed:
            print(f'FAIL: these notebooks raised: {failed}', file=sys.stderr)
            return 1
    src = BUILD / 'src'
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    doc_url = f"{cfg.doc_host.rstrip('/')}{cfg.doc_baseurl.rstrip('/')}/"
    print(f'processing {len(names)} notebooks with nbdev ...', flush=True)
    for n in names:
        process(n, BUILD / 'exec', src, doc_url)
    (src / 'extra.css').write_text(EXTRA_CSS)
    (BUILD / 'mkdocs.yml').write_text(mkdocs_yml(names, doc_url))
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    build(load_config(str(BUILD / 'mkdocs.yml')))
    print(f'docs built in {time.time() - t0:.0f} s: {SITE / "index.html"}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
