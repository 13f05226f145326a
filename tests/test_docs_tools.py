"""The docs pipeline's own logic (tools/build_docs.py, tools/check_site.py, .github/workflows/deploy.yaml).

The browser check itself runs in `make docs-check` (and in the deploy workflow, before the site is published)."""

import json
import signal
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'tools'))
import build_docs  # noqa: E402 (found through the path set above)
import check_site  # noqa: E402

URL = 'https://darts-nb.github.io/darts_nb/'


def test_pages_are_named_as_nbdev_names_them():
    assert [
        build_docs.page_name(n) for n in ('index.ipynb', '04_surgery.ipynb', '01a_containment.ipynb', '22_cli.ipynb')
    ] == ['index', 'surgery', 'containment', 'cli']
    assert build_docs.notebooks()[0] == 'index.ipynb'
    assert len(build_docs.notebooks()) == len(list((ROOT / 'nbs').glob('*.ipynb')))


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
    assert check_site.expected(tmp_path / 'p.ipynb') == dict(
        outputs=2, figures=1, tables=1, documented=['hiddencachesave']
    )


def _cell(i, src, outputs=None, n=None):
    return dict(cell_type='code', id=i, metadata={}, source=src, outputs=outputs or [], execution_count=n)


def _nb(cells):
    meta = {'kernelspec': {'name': 'python3', 'display_name': 'Python 3', 'language': 'python'}}
    return dict(nbformat=4, nbformat_minor=5, metadata=meta, cells=cells)


SOURCE = [  # a lesson notebook as it is in nbs/: clean, without outputs
    dict(cell_type='markdown', id='t', metadata={}, source='# Tiny\n\n> a tiny lesson'),
    _cell('d', '#| default_exp tiny'),
    _cell('e', '#| export\ndef f(x):\n    return 2 * x'),
    _cell('h', '#| hide\ny = 1'),
    _cell('a', 'f(21)'),
    _cell('b', "print('hi')"),
    _cell('s', '#| slow\nf(0)'),
]
RESULT = dict(data={'text/plain': ['42']}, execution_count=2, metadata={}, output_type='execute_result')
STREAM = dict(name='stdout', output_type='stream', text=['hi\n'])


def _site(tmp_path, page_cells, source=SOURCE):
    "A tiny fake site: nbs/01_tiny.ipynb, its processed notebook src/tiny.ipynb and its page site/tiny.html."
    for d in ('nbs', 'src', 'site'):
        (tmp_path / d).mkdir(exist_ok=True)
    (tmp_path / 'nbs' / '01_tiny.ipynb').write_text(json.dumps(_nb(source)))
    (tmp_path / 'src' / 'tiny.ipynb').write_text(json.dumps(_nb(page_cells)))
    (tmp_path / 'site' / 'tiny.html').write_text('<html></html>')
    return check_site.site_errors(
        tmp_path / 'site', tmp_path / 'src', tmp_path / 'nbs', ['01_tiny.ipynb'], ['slow', 'cuda', 'notest']
    )


EXECUTED = [
    _cell('sd', 'show_doc(f)', [dict(data={'text/markdown': ['### f']}, output_type='execute_result')], 1),
    _cell('a', 'f(21)', [RESULT], 2),
    _cell('b', "print('hi')", [STREAM], 3),
    _cell('s', 'f(0)'),  # slow: not run by nbdev-test, so not required
]


def test_a_site_with_every_lesson_executed_passes(tmp_path):
    assert _site(tmp_path, EXECUTED) == []


def test_a_site_built_without_executing_fails(tmp_path):
    "The old deploy (nbdev-docs, no execution) or build_docs.py --no-exec without an executed copy: code, no results."
    unexecuted = [_cell('sd', 'show_doc(f)', EXECUTED[0]['outputs'], 1), _cell('a', 'f(21)'), _cell('b', "print('hi')")]
    errs = _site(tmp_path, unexecuted)
    assert len(errs) == 1, errs
    assert 'tiny.html: 2 of 2 lesson cell(s) were not executed' in errs[0], errs
    assert "['a', 'b']" in errs[0]


def test_a_site_from_stripped_notebooks_fails(tmp_path):
    """Executed notebooks stripped before processing make pages without results: outputs cleared (as
    `jupyter nbconvert --clear-output` does), or cleaned by nbdev-clean (no execution counts: not run by the build)."""
    from nbdev.clean import clean_nb

    cleared = [{**c, 'outputs': [], 'execution_count': None} for c in EXECUTED]
    cleaned = _nb(json.loads(json.dumps(EXECUTED)))
    clean_nb(cleaned)
    for cells in (cleared, cleaned['cells']):
        errs = _site(tmp_path, cells)
        assert len(errs) == 1, errs
        assert '2 of 2 lesson cell(s) were not executed' in errs[0], errs


def test_a_site_from_an_old_execution_or_without_a_lesson_fails(tmp_path):
    changed = [*SOURCE[:4], _cell('a', 'f(22)'), *SOURCE[5:]]
    errs = _site(tmp_path, EXECUTED, source=changed)
    assert len(errs) == 1
    assert "1 lesson cell(s) show outputs of other code than 01_tiny.ipynb has now" in errs[0]
    errs = _site(tmp_path, [c for c in EXECUTED if c['id'] != 'b'])
    assert len(errs) == 1
    assert "1 lesson cell(s) of 01_tiny.ipynb are not on the page: ['b']" in errs[0]


def test_a_partial_site_fails(tmp_path):
    _site(tmp_path, EXECUTED)
    (tmp_path / 'site' / 'tiny.html').unlink()
    errs = check_site.site_errors(
        tmp_path / 'site', tmp_path / 'src', tmp_path / 'nbs', ['01_tiny.ipynb', '02_other.ipynb'], ['slow']
    )
    assert errs == [
        'tiny.html is missing (its notebook was built)',
        'other.html: 02_other.ipynb was not built (no src/other.ipynb): the site is partial',
    ]


def test_a_page_that_renders_fewer_outputs_than_its_notebook_fails(tmp_path):
    (tmp_path / 'tiny.ipynb').write_text(json.dumps(_nb(EXECUTED)))
    want = check_site.expected(tmp_path / 'tiny.ipynb')
    assert want == dict(outputs=3, figures=0, tables=0, documented=['f'])
    facts = dict(outputs=3, images=[], svgs=0, tables=0, headings=['f'])
    assert check_site.page_errors('tiny', want, facts, []) == []
    assert check_site.page_errors('tiny', want, {**facts, 'outputs': 1}, []) == [
        'tiny.html: 1 cell output(s) rendered, its notebook has 3'
    ]
    assert check_site.page_errors('tiny', {**want, 'figures': 1}, facts, []) == [
        'tiny.html: 0 rendered figure(s), its notebook has 1'
    ]


def test_the_build_executes_the_lessons_and_the_check_sees_it(tmp_path):
    "nbdev's real processing of a tiny notebook: unexecuted it fails the check, executed by the build it passes."
    (tmp_path / 'nbs').mkdir()
    (tmp_path / 'exec').mkdir()
    src = tmp_path / 'nbs' / '01_tiny.ipynb'
    src.write_text(json.dumps(_nb([c for c in SOURCE if c['id'] not in ('d', 'e')] + [_cell('x', 'y + 1')])))
    flags = ['slow', 'cuda', 'notest']
    page = build_docs.process('01_tiny.ipynb', tmp_path / 'nbs', tmp_path, URL)
    assert check_site.lesson_errors('tiny', src, page, flags) == [
        "tiny.html: 3 of 3 lesson cell(s) were not executed, so the page shows code without results (built without "
        "executing 01_tiny.ipynb, or from a copy without outputs): ['a', 'b', 'x']"
    ]
    (tmp_path / 'exec' / '01_tiny.ipynb').write_text(src.read_text().replace('f(21)', '21 * 2'))
    sigint = signal.getsignal(signal.SIGINT)  # nbdev's test_nb installs its own handler
    try:
        assert build_docs._execute('01_tiny.ipynb', tmp_path / 'exec')[1]
    finally:
        signal.signal(signal.SIGINT, sigint)
    page = build_docs.process('01_tiny.ipynb', tmp_path / 'exec', tmp_path, URL)
    assert check_site.expected(page)['outputs'] == 3
    assert check_site.lesson_errors('tiny', src, page, flags) == [
        "tiny.html: 1 lesson cell(s) show outputs of other code than 01_tiny.ipynb has now (built from an old "
        "execution): ['a']"
    ]
    src.write_text(src.read_text().replace('f(21)', '21 * 2'))
    assert check_site.lesson_errors('tiny', src, page, flags) == []


def test_the_deploy_workflow_publishes_the_checked_site():
    """The site GitHub Pages gets is the one `make docs-check` built and checked, uploaded by the same job after the
    check; no workflow publishes the unexecuted Quarto site."""
    wf = ROOT / '.github' / 'workflows'
    text = {p.name: p.read_text() for p in wf.glob('*.yaml')}
    assert all('quarto' not in yaml.safe_dump(yaml.safe_load(t)['jobs']) for t in text.values())
    d = yaml.safe_load(text['deploy.yaml'])
    on = d.get('on', d.get(True))  # YAML 1.1 reads a bare `on` as true
    assert {'push', 'pull_request', 'workflow_dispatch'} <= set(on)
    steps = d['jobs']['build']['steps']
    runs = [s.get('run', '') for s in steps]
    uses = [s.get('uses', '').split('@')[0] for s in steps]
    check, upload = runs.index('make docs-check'), uses.index('actions/upload-pages-artifact')
    assert check < upload
    assert steps[upload]['with']['path'].rstrip('/') == '_docs'
    assert not any('docs' in r for r in runs[check + 1 :]), 'nothing may rebuild the site between check and upload'
    deploy = d['jobs']['deploy']
    assert deploy['needs'] == 'build'
    assert 'pull_request' in deploy['if']
    assert deploy['permissions'] == {'pages': 'write', 'id-token': 'write'}
    assert [s['uses'].split('@')[0] for s in deploy['steps']] == ['actions/deploy-pages']
