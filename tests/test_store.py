"The tidy results store: idempotent upserts, sentinels, clear errors, crash safety."

import sqlite3
import subprocess
import sys
import textwrap
import pandas as pd
import pytest
from darts_nb.store import record, load_results, results_path, RESULT_COLUMNS


def test_roundtrip_columns(tmp_path):
    record(tmp_path / 'r', domain='code', metric='pass@1', value=0.5, n=10, stderr=0.1, rank=8, lr=1e-3, seed=0)
    df = load_results(tmp_path / 'r')
    assert list(df.columns) == list(RESULT_COLUMNS)
    row = df.iloc[0]
    assert (row['run'], row['rank'], row['lr'], row['iters'], row['role'], row['n']) == ('r', 8, 1e-3, -1, '', 10)
    assert row['timestamp']
    assert row['version']


def test_idempotent_rerun_replaces(tmp_path):
    base = dict(role='surgered', merge_config='ties', surgery_kind='darts', loss='kl', rank=16, calib_n=50, seed=1)
    for v in (0.1, 0.2, 0.3):
        record(tmp_path, [dict(domain=d, metric='score', value=v, n=5) for d in ('code', 'math')], **base)
    df = load_results(tmp_path)
    assert len(df) == 2
    assert set(df['value']) == {0.3}
    # None and a missing field map to the same sentinel, so they are the same key
    record(tmp_path, domain='x', metric='m', value=1.0, rank=None)
    record(tmp_path, domain='x', metric='m', value=2.0)
    df = load_results(tmp_path)
    assert len(df) == 3
    assert df.loc[df.domain == 'x', 'value'].tolist() == [2.0]
    # a different seed is a different configuration
    record(tmp_path, domain='x', metric='m', value=3.0, seed=7)
    assert len(load_results(tmp_path)) == 4


def test_dataframe_and_many_dirs(tmp_path):
    rows = pd.DataFrame({'domain': ['a', 'b'], 'metric': ['m', 'm'], 'value': [1.0, 2.0], 'n': [3, 4]})
    assert record(tmp_path / 'one', rows, role='expert') == 2
    record(tmp_path / 'two', domain='a', metric='m', value=5.0)
    both = load_results([tmp_path / 'one', tmp_path / 'two'])
    assert sorted(both['run']) == ['one', 'one', 'two']


@pytest.mark.parametrize(
    'kw,match',
    [
        (dict(domain='a', metric='m', value=1.0, colour='red'), 'colour'),
        (dict(domain='a', value=1.0), 'metric'),
        (dict(domain='a', metric='m', value='high'), 'value'),
        (dict(domain='a', metric='m', value=float('nan')), 'value'),
        (dict(domain='a', metric='m', value=1.0, role='boss'), 'role'),
    ],
)
def test_bad_rows(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        record(tmp_path, **kw)
    assert not results_path(tmp_path).exists()  # nothing half-written


def test_bad_inputs(tmp_path):
    with pytest.raises(TypeError, match='rows'):
        record(tmp_path, 'not rows')
    with pytest.raises(FileNotFoundError, match='results'):
        load_results(tmp_path / 'missing')
    # one bad row aborts the whole batch
    record(tmp_path, domain='a', metric='m', value=1.0)
    with pytest.raises(ValueError):
        record(tmp_path, [dict(domain='b', metric='m', value=2.0), dict(domain='c', value=3.0)])
    assert load_results(tmp_path)['domain'].tolist() == ['a']


def test_wal_and_unique_key(tmp_path):
    record(tmp_path, domain='a', metric='m', value=1.0)
    con = sqlite3.connect(results_path(tmp_path))
    assert con.execute('PRAGMA journal_mode').fetchone()[0] == 'wal'
    with pytest.raises(sqlite3.IntegrityError):
        cols = ['run', 'domain', 'metric', 'value']
        con.execute(f"INSERT INTO results ({','.join(cols)}) VALUES (?,?,?,?)", (tmp_path.name, 'a', 'm', 9.0))
    con.close()


def test_killed_writer_leaves_previous_state(tmp_path):
    record(tmp_path, domain='a', metric='m', value=1.0)
    # a writer that dies (os._exit) in the middle of a transaction
    code = textwrap.dedent(f"""
        import os, sqlite3
        from darts_nb.store import _connect, results_path
        con = _connect(results_path({str(tmp_path)!r}))
        con.execute('BEGIN')
        con.execute("UPDATE results SET value = 99")
        con.execute("INSERT INTO results (run, domain, metric, value) VALUES ('r', 'z', 'm', 5)")
        os._exit(9)
    """)
    rc = subprocess.run([sys.executable, '-c', code]).returncode
    assert rc == 9
    df = load_results(tmp_path)
    assert df['value'].tolist() == [1.0]
    assert df['domain'].tolist() == ['a']
    record(tmp_path, domain='a', metric='m', value=2.0)  # and the store is still writable
    assert load_results(tmp_path)['value'].tolist() == [2.0]


def test_concurrent_writers(tmp_path):
    code = (
        "import sys\nfrom darts_nb.store import record\n"
        "for i in range(20): record(sys.argv[1], domain=sys.argv[2], metric='m', value=float(i), iters=i)"
    )
    ps = [subprocess.Popen([sys.executable, '-c', code, str(tmp_path), d]) for d in ('a', 'b')]
    assert [p.wait() for p in ps] == [0, 0]
    df = load_results(tmp_path)
    assert len(df) == 40
    assert df.groupby('domain').size().tolist() == [20, 20]
