"""Check the built docs site in a real browser: headless Chromium opens the index and every notebook's page.

The site in _docs/ (from `make docs`) is served on 127.0.0.1 and each page is loaded by Chromium through
Playwright (Debian's chromium: `apt-get install chromium`; no browser is downloaded). The check fails on
- a page that is missing or does not load (HTTP status, a JavaScript error),
- an internal link whose target page is missing, or whose #anchor is not on the target page,
- an image that did not render (not complete, or zero natural width),
- a page with fewer rendered figures or tables than its processed notebook has outputs of that kind,
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


def expected(nb: Path) -> dict:
    "What a page must show: its notebook's figures, tables and documented names."
    cells = json.loads(nb.read_text())['cells']
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
        figures=figs, tables=tables, documented=[n.replace('.', '').lower() for n in docs]
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
  images: [...document.querySelectorAll('article img')]
    .map(i => ({src: i.src.slice(0, 80), ok: i.complete && i.naturalWidth > 0})),
  svgs: document.querySelectorAll('article .jp-OutputArea svg, article .output svg').length,
  tables: document.querySelectorAll('article .jp-OutputArea table, article .jp-RenderedHTMLCommon table').length,
  headings: [...document.querySelectorAll('article h1, article h2, article h3, article h4')].map(h => h.id),
})"""


def check_page(page, base: str, name: str, want: dict, screens: Path, ids_of: dict) -> list[str]:
    "Load one page, screenshot it, and list what is wrong with it."
    errs, js = [], []
    page.on('pageerror', lambda e: js.append(str(e)))
    r = page.goto(urljoin(base, f'{name}.html'), wait_until='load')
    if r is None or r.status != 200:
        return [f'{name}.html: HTTP {r.status if r else "no response"}']
    page.wait_for_timeout(200)
    f = page.evaluate(PAGE_FACTS)
    ids_of[name] = set(f['ids'])
    page.screenshot(path=str(screens / f'{name}.png'), full_page=True)
    if js:
        errs.append(f'{name}.html: JavaScript errors: {js[:3]}')
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
    page.links_ = f['links']
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
    names = sorted(p.stem for p in SRC.glob('*.ipynb'))
    errs = [f'{n}.html is missing (its notebook was built)' for n in names if not (site / f'{n}.html').exists()]
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
        f'site ok: {len(names)} pages opened in Chromium, links, images, figures and tables checked; '
        f'screenshots in {screens}'
    )
    return 0


if __name__ == '__main__':
    sys.exit(main())
