"""Check the built docs site in a real browser: headless Chromium opens the index and every notebook's page.

The site in _docs/ (from `make docs-site`; the one .github/workflows/deploy.yaml publishes once this check passes)
is served on 127.0.0.1 and each page is loaded by Chromium through Playwright (Debian's chromium:
`apt-get install chromium`; no browser is downloaded). The check fails on
- a notebook of nbs/sidebar.yml without its page (a partial site: `build_docs.py --only`),
- a page whose lessons were not executed from the current notebook: a cell that nbdev-test runs and the page shows
  (not exported, not hidden) must be on the page with an execution count and the notebook's code (a site built
  without executing, or from stripped or stale notebooks, shows code without results),
- a page that is missing or does not load (HTTP status, a JavaScript error),
- an internal link whose target page is missing, or whose #anchor is not on the target page,
- an image that did not render (not complete, or zero natural width),
- a page with fewer rendered outputs, figures or tables than its processed notebook has,
- a page whose notebook documents functions (`show_doc`) without each one's heading and parameter table,
and saves a full-page screenshot of every page in build/docs/screens/.

usage: python tools/check_site.py [--site _docs] [--screens build/docs/screens]"""

import argparse
import functools
import http.server
import json
import re
import shutil
import sys
import threading
from pathlib import Path
from urllib.parse import urljoin, urlparse

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / 'build' / 'docs' / 'src'  # the processed notebooks the pages were rendered from
HIDDEN = {'export', 'exporti', 'hide', 'default_exp'}  # nbdev's `rm_export`: code cells that are not on a page


def _code(src) -> str:
    "A cell's code without its `#|` directives, as a page shows it."
    src = ''.join(src) if isinstance(src, list) else src
    return '\n'.join(line for line in src.splitlines() if not line.startswith('#|')).strip('\n')


def _shows(o: dict) -> bool:
    "Whether an output has something to show: text that is not blank, an error, or data."
    if o.get('output_type') == 'stream':
        return bool(''.join(o.get('text', '')).strip())
    if o.get('output_type') == 'error':
        return True
    return any(''.join(v).strip() if isinstance(v, (str, list)) else bool(v) for v in o.get('data', {}).values())


def lesson_errors(name: str, source: Path, page_nb: Path, skip_flags: list[str]) -> list[str]:
    """The lessons a page shows were run on the notebook as it is: every code cell of `source` (nbs/) that nbdev-test
    runs (not flagged with one of `skip_flags`) and nbdev shows (not exported, not hidden) is in `page_nb` (the
    processed notebook the page was rendered from) with an execution count and the same code."""
    from nbdev.test import nb_test_cells

    page = {c.get('id'): c for c in json.loads(page_nb.read_text())['cells'] if c['cell_type'] == 'code'}
    lessons = [c for c in nb_test_cells(source, skip_flags) if not (c.directives_ or {}).keys() & HIDDEN]
    ran = {c.get('id'): c for c in lessons}
    gone = [i for i in ran if i not in page]
    idle = [i for i in ran if i in page and page[i].get('execution_count') is None]
    stale = [
        i
        for i, c in ran.items()
        if i in page and page[i].get('execution_count') is not None and _code(page[i]['source']) != _code(c.source)
    ]
    errs = []
    if gone:
        errs.append(f'{name}.html: {len(gone)} lesson cell(s) of {source.name} are not on the page: {gone[:5]}')
    if idle:
        errs.append(
            f'{name}.html: {len(idle)} of {len(lessons)} lesson cell(s) were not executed, so the page shows code '
            f'without results (built without executing {source.name}, or from a copy without outputs): {idle[:5]}'
        )
    if stale:
        errs.append(
            f'{name}.html: {len(stale)} lesson cell(s) show outputs of other code than {source.name} has now '
            f'(built from an old execution): {stale[:5]}'
        )
    return errs


def site_errors(site: Path, src: Path, nbs: Path, notebooks: list[str], skip_flags: list[str]) -> list[str]:
    """What is wrong with the site before a browser opens it: each of `notebooks` (file names in `nbs`) has its
    processed notebook in `src` and its page in `site`, and the page's lessons were executed (`lesson_errors`)."""
    from build_docs import page_name

    errs = []
    for nb in notebooks:
        name = page_name(nb)
        if not (src / f'{name}.ipynb').exists():
            errs.append(f'{name}.html: {nb} was not built (no {src.name}/{name}.ipynb): the site is partial')
            continue
        if not (site / f'{name}.html').exists():
            errs.append(f'{name}.html is missing (its notebook was built)')
        errs += lesson_errors(name, nbs / nb, src / f'{name}.ipynb', skip_flags)
    return errs


def expected(nb: Path) -> dict:
    """What a page must show: its notebook's outputs (code cells with something to show), figures, tables and
    documented names."""
    cells = json.loads(nb.read_text())['cells']
    shown = sum(1 for c in cells if c['cell_type'] == 'code' and any(_shows(o) for o in c.get('outputs', [])))
    outs = [o for c in cells if c['cell_type'] == 'code' for o in c.get('outputs', [])]
    data = [o.get('data', {}) for o in outs]
    figs = sum(1 for d in data if 'image/png' in d or 'image/svg+xml' in d or 'image/jpeg' in d)
    tables = sum(1 for d in data if '<table' in ''.join(d.get('text/html', '')))
    docs = [
        n
        for c in cells
        if c['cell_type'] == 'code'
        for n in re.findall(r'^show_doc\(([\w.]+)', ''.join(c['source']), re.M)
    ]
    return dict(
        outputs=shown, figures=figs, tables=tables, documented=[n.replace('.', '').lower() for n in docs]
    )  # MkDocs' heading id


def serve(site: Path) -> tuple:
    "An HTTP server for `site` on 127.0.0.1 (a free port), in a thread; (server, base URL)."

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f'http://127.0.0.1:{srv.server_address[1]}/'


PAGE_FACTS = """() => ({
  links: [...document.querySelectorAll('a[href]')].map(a => a.href),
  ids: [...document.querySelectorAll('[id]')].map(e => e.id),
  outputs: [...document.querySelectorAll('article .jp-Cell-outputWrapper')]
    .filter(e => e.innerText.trim() || e.querySelector('img, svg, table')).length,
  images: [...document.querySelectorAll('article img')]
    .map(i => ({src: i.src.slice(0, 80), ok: i.complete && i.naturalWidth > 0})),
  svgs: document.querySelectorAll('article .jp-OutputArea svg, article .output svg').length,
  tables: document.querySelectorAll('article .jp-OutputArea table, article .jp-RenderedHTMLCommon table').length,
  headings: [...document.querySelectorAll('article h1, article h2, article h3, article h4')].map(h => h.id),
})"""


def check_page(page, base: str, name: str, want: dict, screens: Path, ids_of: dict) -> list[str]:
    "Load one page, screenshot it, and list what is wrong with it."
    js = []
    page.on('pageerror', lambda e: js.append(str(e)))
    r = page.goto(urljoin(base, f'{name}.html'), wait_until='load')
    if r is None or r.status != 200:
        return [f'{name}.html: HTTP {r.status if r else "no response"}']
    page.wait_for_timeout(200)
    f = page.evaluate(PAGE_FACTS)
    ids_of[name] = set(f['ids'])
    page.screenshot(path=str(screens / f'{name}.png'), full_page=True)
    page.links_ = f['links']
    return page_errors(name, want, f, js)


def page_errors(name: str, want: dict, f: dict, js: list[str]) -> list[str]:
    "What is wrong with a page, from what the browser found on it (`f`: PAGE_FACTS) and what it must show (`want`)."
    errs = []
    if js:
        errs.append(f'{name}.html: JavaScript errors: {js[:3]}')
    if f['outputs'] < want['outputs']:
        errs.append(f'{name}.html: {f["outputs"]} cell output(s) rendered, its notebook has {want["outputs"]}')
    bad = [i['src'] for i in f['images'] if not i['ok']]
    if bad:
        errs.append(f'{name}.html: {len(bad)} image(s) did not render: {bad[:3]}')
    shown = sum(i['ok'] for i in f['images']) + f['svgs']
    if shown < want['figures']:
        errs.append(f'{name}.html: {shown} rendered figure(s), its notebook has {want["figures"]}')
    if f['tables'] < want['tables']:
        errs.append(f'{name}.html: {f["tables"]} table(s), its notebook has {want["tables"]}')
    for n in want['documented']:
        if n not in {h.lower() for h in f['headings']}:
            errs.append(f'{name}.html: no heading for the documented {n!r}')
    return errs


def check_links(pages: dict, base: str, ids_of: dict, site: Path) -> list[str]:
    "Every same-site link points to a file of the site, and its #anchor (on a page) exists there."
    errs, host = [], urlparse(base).netloc
    for name, links in pages.items():
        for link in set(links):
            u = urlparse(link)
            if u.netloc != host:
                continue
            path = u.path.lstrip('/') or 'index.html'
            if not (site / path).exists():
                errs.append(f'{name}.html links to a missing {path}')
                continue
            target = path[:-5] if path.endswith('.html') else None
            if u.fragment and target in ids_of and u.fragment not in ids_of[target]:
                errs.append(f'{name}.html links to {path}#{u.fragment}, which has no such anchor')
    return errs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--site', default=str(ROOT / '_docs'))
    ap.add_argument('--screens', default=str(ROOT / 'build' / 'docs' / 'screens'))
    a = ap.parse_args(argv)
    site, screens = Path(a.site), Path(a.screens)
    if not (site / 'index.html').exists():
        print(f'FAIL: {site / "index.html"} is missing: run `make docs` first', file=sys.stderr)
        return 1
    chromium = shutil.which('chromium') or shutil.which('chromium-browser') or shutil.which('google-chrome')
    if not chromium:
        print('FAIL: no Chromium found: `apt-get install chromium` (Debian) and run again', file=sys.stderr)
        return 1
    if screens.exists():
        shutil.rmtree(screens)
    screens.mkdir(parents=True)
    from build_docs import notebooks, page_name
    from nbdev.config import get_config

    nbs = notebooks()
    errs = site_errors(site, SRC, ROOT / 'nbs', nbs, get_config().tst_flags.split())
    names = [page_name(n) for n in nbs if (SRC / f'{page_name(n)}.ipynb').exists()]
    from playwright.sync_api import sync_playwright

    srv, base = serve(site)
    links, ids_of = {}, {}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=['--no-sandbox'])
            for n in names:
                if not (site / f'{n}.html').exists():
                    continue
                page = browser.new_page(viewport={'width': 1280, 'height': 900})
                errs += check_page(page, base, n, expected(SRC / f'{n}.ipynb'), screens, ids_of)
                links[n] = page.links_
                page.close()
            browser.close()
    finally:
        srv.shutdown()
    errs += check_links(links, base, ids_of, site)
    if errs:
        print(f'FAIL: {len(errs)} problem(s) in the site:', file=sys.stderr)
        for e in errs:
            print(f'- {e}', file=sys.stderr)
        return 1
    print(
        f'site ok: {len(names)} pages opened in Chromium, lessons executed, links, images, outputs, figures and tables '
        f'checked; '
        f'screenshots in {screens}'
    )
    return 0


if __name__ == '__main__':
    sys.exit(main())
