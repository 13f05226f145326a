"""The offline docs build's own logic (tools/build_docs.py, tools/check_site.py).

The browser check itself runs in `make docs-check`."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'tools'))
import build_docs  # noqa: E402 (found through the path set above)
import check_site  # noqa: E402

URL = 'https://darts-nb.github.io/darts_nb/'


def test_pages_are_named_as_nbdev_names_them():
    assert [
        build_docs.page_name(n) for n in ('index.ipynb', '04_surgery.ipynb', '01a_containment.ipynb', '22_cli.ipynb')
    ] == ['index', 'surgery', 'containment', 'cli']
    assert build_docs.notebooks()[0] == 'index.ipynb' and len(build_docs.notebooks()) == len(
        list((ROOT / 'nbs').glob('*.ipynb'))
    )


def test_links_to_the_published_site_become_local_and_fit_mkdocs_headings():
    md = (
        f'[`run_code`]({URL}sandbox.html#run_code), [`HiddenCache.save`]({URL}cache.html#hiddencache.save), '
        f'[`_sandboxed`]({URL}containment.html#_sandboxed), '
        f'[source](https://github.com/x#L3){{target="_blank" style="float:right"}}'
    )
    assert build_docs._local_links(md, URL) == (
        '[`run_code`](sandbox.html#run_code), [`HiddenCache.save`](cache.html#hiddencachesave), '
        '`_sandboxed`, [source](https://github.com/x#L3)'
    )


def test_headings_keep_no_links():
    assert (
        build_docs._local_links(f'## The [`ci`]({URL}report.html#ci) zoo\ntext [`ci`]({URL}report.html#ci)', URL)
        == '## The ci zoo\ntext [`ci`](report.html#ci)'
    )


def test_cells_are_valid_nbformat_and_echo_false_hides_the_source():
    c = build_docs._for_mkdocs(
        {
            'cell_type': 'code',
            'source': '#| echo: false\n#| output: asis\nshow_doc(f)',
            'has_sd': True,
            'metadata': {'execution': {'total': 0.1}},
            'outputs': [],
            'execution_count': 1,
        },
        3,
    )
    assert c == {
        'cell_type': 'code',
        'source': 'show_doc(f)',
        'metadata': {'tags': ['hide_input']},
        'outputs': [],
        'execution_count': 1,
        'id': 'cell3',
    }


def test_a_page_must_show_what_its_notebook_has(tmp_path):
    nb = {
        'cells': [
            {'cell_type': 'code', 'source': 'show_doc(HiddenCache.save)', 'outputs': []},
            {'cell_type': 'code', 'source': 'fig', 'outputs': [{'data': {'image/png': 'iVBOR'}}]},
            {'cell_type': 'code', 'source': 'df', 'outputs': [{'data': {'text/html': ['<table>', '</table>']}}]},
        ]
    }
    (tmp_path / 'p.ipynb').write_text(json.dumps(nb))
    assert check_site.expected(tmp_path / 'p.ipynb') == dict(figures=1, tables=1, documented=['hiddencachesave'])
