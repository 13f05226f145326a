"""Issue 16, group A: results, runs and the report. A bad-input / fault table: each case is either a clear error
(its type, and a message naming the file, argument or value) or a correct result, and each checks that nothing
half-written is left and nothing recorded is lost."""

import errno
import json
import re
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path
import pytest
from darts_nb import store as store_mod
from darts_nb.store import StoreError, record, load_results, load_items, results_path, KEY_COLUMNS, VALUE_COLUMNS
from darts_nb.runs import (
    Run,
    DARTS,
    NONE,
    make_run,
    open_run,
    run_dir,
    recorded,
    recorded_items,
    record_job,
    row_source,
    merge_state,
    need_merge,
    merges_dir,
    score_merges,
    domain_cache,
    _grid,
)
from darts_nb.report import write_report
from darts_nb.experiments import EXPERIMENTS, run_all, _check_applies
from darts_nb.zoo import Profile
from darts_nb.cli import main as cli_main
from conftest import half_written

DOM = ('code', 'math', 'instruct')
METRIC = {'code': 'pass@1', 'math': 'exact_match', 'instruct': 'win_rate'}


def hand_run(home: Path, name='r', content_key='inputs-1', eval_profile='toy') -> Run:
    "A run made by hand (no zoo), its directory under `home`."
    return Run(
        name,
        Profile('fake', str(home / 'm' / 'base'), {d: str(home / 'm' / d) for d in DOM}, eval_profile=eval_profile),
        content_key=content_key,
    )


def job(key: dict, value=50.0) -> dict:
    return dict(
        key=key,
        rows=[dict(metric=METRIC[key.get('domain', 'math')], value=value, n=4)],
        items=[dict(metric=METRIC[key.get('domain', 'math')], item=f'i{k}', value=100.0 * (k < 2)) for k in range(4)],
    )


# ---------------------------------------------------------------- 1. results keyed by what produced them


def test_rows_of_other_inputs_are_never_returned_and_kept(home):
    run = hand_run(home)
    record_job(run, job(dict(role='base', merge_config='base', domain='math')))
    assert len(recorded(run, role='base')) == 1
    assert len(recorded_items(run, role='base')) == 4
    other = hand_run(home, content_key='inputs-2')  # the same run name, other inputs (eval limit, data, models)
    assert recorded(other, role='base').empty
    assert recorded_items(other, role='base').empty
    assert len(load_results(run.dir)) == 1  # not returned, and not lost
    record_job(other, job(dict(role='base', merge_config='base', domain='math'), value=75.0))
    assert recorded(run, role='base').value.tolist() == [50.0]
    assert recorded(other, role='base').value.tolist() == [75.0]


def test_a_merge_of_the_same_name_with_another_configuration(home):
    run = hand_run(home)
    key = dict(role='merged', merge_config='ta-0.5', domain='math', surgery_kind='')
    record_job(run, job(key))
    assert len(recorded(run, **key)) == 1
    later = hand_run(home)  # the grid now names another configuration 'ta-0.5'
    grid = {k: dict(v) for k, v in _grid(run).items()}
    grid['ta-0.5'] = {
        **grid['ta-0.5'],
        'models': [{**m, 'parameters': {'weight': 0.55}} for m in grid['ta-0.5']['models']],
    }
    later._memo['grid'] = grid
    assert row_source(later, 'merged', 'ta-0.5') != row_source(run, 'merged', 'ta-0.5')
    assert recorded(later, **key).empty
    assert recorded_items(later, **key).empty
    assert row_source(later, 'base', 'base') == row_source(run, 'base', 'base')  # the models' own rows still hold


def test_a_merge_directory_of_another_configuration_is_refused_not_scored(home):
    run = hand_run(home)
    d = merges_dir(run) / 'ta-0.5'
    d.mkdir(parents=True)
    cfg = {**_grid(run)['ta-0.5'], 'dtype': 'bfloat16'}
    import yaml
    from safetensors.torch import save_file
    import torch

    (d / 'merge.yaml').write_text(yaml.safe_dump(cfg))
    (d / 'config.json').write_text('{"model_type": "llama"}')
    save_file({'w': torch.zeros(2)}, str(d / 'model.safetensors'))
    assert merge_state(run, 'ta-0.5') == 'other'
    with pytest.raises(ValueError, match="merge 'ta-0.5'.*holds another configuration") as e:
        need_merge(run, 'ta-0.5')
    assert str(d) in str(e.value)
    score_merges(run, ['ta-0.5'])  # left out: never scored under this name
    assert not results_path(run.dir).exists()
    (d / 'merge.yaml').write_text(yaml.safe_dump(json.loads(json.dumps(_grid(run)['ta-0.5']))))
    assert merge_state(run, 'ta-0.5') == 'ready'


def test_a_run_hand_made_reads_unkeyed_rows_only(home):
    bare, keyed = hand_run(home, content_key=''), hand_run(home)
    record(bare.dir, dict(metric='exact_match', value=1.0), role='base', merge_config='base', domain='math')
    assert len(recorded(bare, role='base')) == 1
    assert recorded(keyed, role='base').empty


@pytest.fixture(scope='module')
def ci_run():
    "A ci run with results recorded (the zoo of $DARTS_HOME is built once; the run is removed after)."
    name = 'test-bad-inputs-results'
    shutil.rmtree(run_dir(name), ignore_errors=True)
    run = make_run('ci', name, quick=True, eval_limit=3)
    record_job(run, job(dict(role='base', merge_config='base', domain='math')))
    yield run
    shutil.rmtree(run_dir(name), ignore_errors=True)


@pytest.mark.parametrize(
    'kw,msg',
    [
        (dict(quick=False), 'eval items per domain (--eval-limit): 3 then, None now'),  # darts surgery into a quick run
        (dict(quick=True, eval_limit=8), 'eval items per domain (--eval-limit): 3 then, 8 now'),
    ],
)
def test_reusing_a_run_with_other_inputs_is_refused(ci_run, kw, msg):
    meta = ci_run.dir / 'run.json'
    before = meta.read_bytes()
    with pytest.raises(ValueError, match=msg.replace('(', r'\(').replace(')', r'\)')) as e:
        make_run('ci', ci_run.name, **kw)
    assert f"run '{ci_run.name}'" in str(e.value)
    assert '--name' in str(e.value)
    assert meta.read_bytes() == before
    assert len(recorded(ci_run, role='base')) == 1  # nothing rewritten, nothing lost
    again = make_run('ci', ci_run.name, quick=True, eval_limit=3)  # the same inputs: its rows are found
    assert again.content_key == ci_run.content_key
    assert len(recorded(again, role='base')) == 1


def test_a_run_of_the_version_before_content_keys_is_refused_for_writing(ci_run):
    meta = ci_run.dir / 'run.json'
    m = json.loads(meta.read_text())
    keep = meta.read_bytes()
    meta.write_text(json.dumps({k: v for k, v in m.items() if k not in ('inputs', 'content_key')}))
    try:
        old = meta.read_bytes()
        with pytest.raises(ValueError, match='recorded by an older darts_nb'):
            make_run('ci', ci_run.name, quick=True, eval_limit=3)
        assert meta.read_bytes() == old
    finally:
        meta.write_bytes(keep)


def test_domain_cache_is_keyed_by_its_texts(ci_run):
    a = domain_cache(ci_run, 'ta-0.5', 'math', n=3, mode='prompt')
    b = domain_cache(ci_run, 'ta-0.5', 'math', n=3, mode='prompt+reference')
    c = domain_cache(ci_run, 'ta-0.5', 'math', n=3, seed=1, mode='prompt')
    assert a.meta['prompt_hash'] != b.meta['prompt_hash']
    assert a.meta['prompt_hash'] != c.meta['prompt_hash']
    assert domain_cache(ci_run, 'ta-0.5', 'math', n=3, mode='prompt').meta['prompt_hash'] == a.meta['prompt_hash']


@pytest.mark.parametrize('text', ['', '{not json', '[1, 2]', '{"quick": true}'])
def test_a_damaged_run_json_is_named(home, text):
    (run_dir('broken')).mkdir(parents=True)
    meta = run_dir('broken') / 'run.json'
    meta.write_text(text)
    for f in (lambda: open_run('broken'), lambda: make_run('ci', 'broken')):
        with pytest.raises(ValueError, match=str(meta)):
            f()
    assert meta.read_text() == text
    assert not (home / 'zoo-ci').exists()  # refused before anything was built


# ---------------------------------------------------------------- 2. corrupt, truncated or old-schema stores


def _good_store(d: Path) -> bytes:
    record(
        d,
        [dict(domain='math', metric='exact_match', value=float(i), iters=i) for i in range(300)],
        role='base',
        merge_config='base',
    )
    return results_path(d).read_bytes()


def _legacy(p: Path, drop: str):
    keys = [k for k in KEY_COLUMNS if k != drop]
    con = sqlite3.connect(p)
    with con:
        con.execute(f"CREATE TABLE results ({', '.join(keys + list(VALUE_COLUMNS))}, UNIQUE ({', '.join(keys)}))")
        con.execute(
            'INSERT INTO results (run, role, merge_config, domain, metric, value) '
            "VALUES ('r', 'base', 'base', 'math', 'exact_match', 1.0)"
        )
    con.close()


def _damage(case: str, p: Path, good: bytes):
    if case == 'zero bytes':
        p.write_bytes(b'')
    elif case == 'not sqlite':
        p.write_bytes(b'{"rows": []}\n' * 100)
    elif case == 'truncated half':
        p.write_bytes(good[: len(good) // 2])
    elif case == 'truncated header':
        p.write_bytes(good[:100])
    elif case == 'garbled pages':
        p.write_bytes(good[:8192] + bytes(range(256)) * 16 + good[8192 + 4096 :])
    elif case == 'no results table':
        con = sqlite3.connect(p)
        con.execute('CREATE TABLE other (x)')
        con.commit()
        con.close()
    elif case == 'old schema':
        _legacy(p, 'calib_text')
    elif case == 'a directory':
        p.mkdir()


CORRUPT = {
    'zero bytes': 'is empty (0 bytes)',
    'not sqlite': 'not a SQLite results store',
    'truncated half': 'corrupt or truncated',
    'truncated header': 'corrupt or truncated',
    'garbled pages': 'corrupt or truncated',
    'no results table': 'without a `results` table',
    'old schema': 'older version',
    'a directory': 'is a directory',
}


def _snapshot(p: Path):
    return 'dir' if p.is_dir() else p.read_bytes()


@pytest.mark.parametrize('case', list(CORRUPT))
def test_a_damaged_store_is_a_clear_error_and_left_as_it_is(home, case, capsys):
    good = _good_store(home / 'good')
    run = hand_run(home, 'bad', content_key='')
    run.dir.mkdir(parents=True)
    p = results_path(run.dir)
    _damage(case, p, good)
    before = _snapshot(p)
    write_json_run(run)
    calls = {
        'load_results': lambda: load_results(run.dir),
        'load_items': lambda: load_items(run.dir),
        'recorded': lambda: recorded(run),
        'record': lambda: record(run.dir, domain='math', metric='m', value=1.0),
        'write_report': lambda: write_report(run, EXPERIMENTS),
    }
    for what, f in calls.items():
        with pytest.raises(StoreError, match=re.escape(CORRUPT[case])) as e:
            f()
        assert str(p) in str(e.value), what
        assert any(w in str(e.value) for w in ('move it aside', 'delete it', 'restore it', 'new run name')), (
            what
        )  # what to do
        assert _snapshot(p) == before, what  # nothing overwritten
    assert not (run.dir / 'report.md').exists()
    assert half_written(run.dir) == (['results.sqlite'] if case == 'zero bytes' else [])
    assert cli_main(['report', 'bad']) == 2  # darts report NAME: the message, no traceback
    err = capsys.readouterr().err
    assert err.startswith('darts report: error: ')
    assert str(p) in err
    assert 'Traceback' not in err


def write_json_run(run: Run):
    "The run.json of a hand-made run, so that `darts report` can reopen it."
    (run.dir / 'run.json').write_text(
        json.dumps(
            dict(
                profile=dict(name=run.profile.name, base=run.profile.base, experts=run.profile.experts),
                quick=False,
                eval_limit=None,
                models_key='',
            )
        )
    )


def test_the_store_of_the_version_before_content_keys_reads_and_takes_no_rows(home, capsys):
    run = hand_run(home, 'old', content_key='')
    run.dir.mkdir(parents=True)
    p = results_path(run.dir)
    _legacy(p, 'source')
    before = p.read_bytes()
    write_json_run(run)
    assert recorded(run, role='base').value.tolist() == [1.0]
    assert load_items(run.dir).empty
    with pytest.raises(StoreError, match='older darts_nb') as e:
        record(run.dir, domain='math', metric='m', value=2.0)
    assert str(p) in str(e.value)
    assert '--name' in str(e.value)
    assert p.read_bytes() == before
    assert cli_main(['report', 'old']) == 0
    assert '## Table 2: individual models' in (run.dir / 'report.md').read_text()


# ---------------------------------------------------------------- 3. reports of partial runs


def _missing_lines(text: str) -> list[str]:
    part = text[text.index('## Not measured in this run') :]
    return [line for line in part.splitlines() if line.startswith('- `')]


@pytest.mark.parametrize(
    'rows,shown',
    [
        ('experts', '## Table 2: individual models'),  # darts run --only experts
        ('surgery', '## Not measured in this run'),  # darts surgery alone: a merged row and a surgered one
        ('nothing', '## Not measured in this run'),
    ],
)
def test_a_partial_run_is_reported_section_by_section(home, rows, shown):
    run = hand_run(home, 'partial')
    if rows == 'experts':
        for m in ('base', *DOM):
            record_job(run, job(dict(role='base' if m == 'base' else 'expert', merge_config=m, domain='math')))
    if rows == 'surgery':
        for a in (NONE, DARTS):
            record_job(run, job(dict(merge_config='ta-0.5', domain='math', **a.key())))
    text = write_report(run, EXPERIMENTS).read_text()
    assert shown in text
    assert (run.dir / 'report.html').exists()
    lines = _missing_lines(text)
    for n, e in EXPERIMENTS.items():  # every record: its section, or one line saying why it has none
        assert (f'## {e.heading}\n' in text) != any(line.startswith(f'- `{n}` ') for line in lines), n
    if rows == 'nothing':
        assert len(lines) == len(EXPERIMENTS)
    main = [line for line in lines if line.startswith('- `main` ')]
    assert len(main) == 1
    assert 'no data in this run yet' in main[0]
    assert '--name partial --only main`' in main[0] and '`darts run --profile ' in main[0], main[
        0
    ]  # the run's own options
    assert half_written(run.dir) == []


def test_a_section_that_cannot_be_made_says_so_and_the_rest_is_written(home, capsys):
    run = hand_run(home, 'partial')
    for m in ('base', *DOM):
        record_job(run, job(dict(role='base' if m == 'base' else 'expert', merge_config=m, domain='math')))

    def broken(run, figs):
        raise KeyError('ta-0.5')

    exps = dict(EXPERIMENTS, main=replace(EXPERIMENTS['main'], section=broken))
    text = write_report(run, exps).read_text()
    main = [line for line in _missing_lines(text) if line.startswith('- `main` ')]
    assert len(main) == 1
    assert 'not made from the partial data of this run' in main[0]
    assert "KeyError: 'ta-0.5'" in main[0]
    assert '## Table 2: individual models' in text
    assert "'main' section" in capsys.readouterr().err


def test_a_record_that_does_not_apply_says_so(home):
    text = write_report(hand_run(home, 'paper-run', eval_profile='paper'), EXPERIMENTS).read_text()
    placement = [line for line in _missing_lines(text) if line.startswith('- `placement` ')]
    assert len(placement) == 1
    assert 'does not apply to the `paper` tasks' in placement[0]


def test_report_of_no_such_run(home, capsys):
    assert cli_main(['report', 'nosuchrun']) == 2
    err = capsys.readouterr().err
    assert "run 'nosuchrun' does not exist" in err
    assert str(run_dir('nosuchrun') / 'run.json') in err
    assert not run_dir('nosuchrun').exists()


# ---------------------------------------------------------------- 4. --only


@pytest.mark.parametrize(
    'only,msg',
    [([], r'only: expected at least one of .*, got \[\]'), (['tables'], r"only=\['tables'\] are not experiments")],
)
def test_only_bad_names_refused_before_anything(home, only, msg):
    with pytest.raises(ValueError, match=msg):
        run_all('ci', 'x', only=only)
    assert not (home / 'zoo-ci').exists()
    assert not run_dir('x').exists()


def test_only_a_record_that_does_not_apply_is_refused(home):
    with pytest.raises(
        ValueError,
        match=r"only=\['placement', 'summary'\]: they apply to toy tasks, not to the 'paper' tasks of profile 'fake'",
    ):
        _check_applies(hand_run(home, eval_profile='paper'), ['main', 'placement', 'summary'])
    _check_applies(hand_run(home), ['placement', 'summary'])  # toy tasks: fine


def test_a_failed_record_fails_the_run_and_reports_what_it_has(ci_run, monkeypatch):
    def boom(run):
        raise RuntimeError('the experts stage failed')

    monkeypatch.setitem(EXPERIMENTS, 'experts', replace(EXPERIMENTS['experts'], run=boom))
    report = ci_run.dir / 'report.md'
    report.unlink(missing_ok=True)
    with pytest.raises(RuntimeError, match='the experts stage failed'):
        run_all('ci', ci_run.name, quick=True, eval_limit=3, only=['experts'])
    assert '## Not measured in this run' in report.read_text()
    assert not (ci_run.dir / 'timings.json').exists()


# ---------------------------------------------------------------- 5. a full disk


def tiny_disk(monkeypatch, room: int | None):
    "SQLite as on a full disk: no page beyond the `room` a database already has (None: its current size)."
    real = sqlite3.connect

    def connect(*a, **k):
        con = real(*a, **k)
        n = con.execute('PRAGMA page_count').fetchone()[0] if room is None else room
        con.execute(f'PRAGMA max_page_count={max(n, 1)}')
        return con

    monkeypatch.setattr(store_mod.sqlite3, 'connect', connect)


def test_full_disk_making_a_new_store_leaves_no_file(home, monkeypatch):
    tiny_disk(monkeypatch, 1)
    d = home / 'fresh'
    with pytest.raises(OSError) as e:
        record(d, domain='math', metric='m', value=1.0)
    assert e.value.errno == errno.ENOSPC
    assert str(results_path(d)) in str(e.value)
    assert 'free some space' in str(e.value)
    assert not results_path(d).exists()
    assert list(d.iterdir()) == []  # no 0-byte results.sqlite, no temporary copy


def test_full_disk_writing_rows_keeps_the_store(home, monkeypatch):
    d = home / 'full'
    record(d, domain='math', metric='m', value=1.0)
    tiny_disk(monkeypatch, None)
    with pytest.raises(OSError) as e:
        record(d, [dict(domain='math', metric='m', value=float(i), iters=i) for i in range(2000)])
    assert e.value.errno == errno.ENOSPC
    assert str(results_path(d)) in str(e.value)
    assert 'nothing was recorded' in str(e.value)
    monkeypatch.undo()
    assert load_results(d).value.tolist() == [1.0]
    assert half_written(d) == []  # the previous state, whole
    record(d, domain='math', metric='m', value=2.0)
    assert load_results(d).value.tolist() == [2.0]


def test_full_disk_writing_the_report_keeps_the_old_one(home, monkeypatch):
    run = hand_run(home, 'r')
    record_job(run, job(dict(role='base', merge_config='base', domain='math')))
    old = write_report(run, EXPERIMENTS).read_text()

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, 'No space left on device')

    monkeypatch.setattr(Path, 'write_text', full)
    with pytest.raises(OSError) as e:
        write_report(run, EXPERIMENTS)
    assert e.value.errno == errno.ENOSPC
    assert str(run.dir / 'report.md') in str(e.value)
    assert (run.dir / 'report.md').read_text() == old
    assert half_written(run.dir) == []
