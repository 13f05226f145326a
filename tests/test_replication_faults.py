"""Faults and attacks on the replication and the report (issue 38): rows keyed by zoo name, one rule for edited or
damaged derived files, missing data said as missing, a suggested command that reopens the run, the recipe's name,
and a models key of the checkpoints' content. Runs and replicas are made by hand (no training); the ci zoo of the
session's DARTS_HOME is only copied or named."""

import json
import os
import shlex
import shutil
import sqlite3
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from darts_nb.core import stable_hash
from darts_nb.domains import DOMAINS, METRICS
from darts_nb.inputs import fingerprint_models_key, models_key, run_inputs
from darts_nb.profiles import Profile, get_profile
from darts_nb.replication import REPLICATION, _plot_replication, replication_table
from darts_nb.report import DerivedFileError, TIMINGS, rerun_command, write_derived, write_report
from darts_nb.runs import DARTS, NONE, STANDARD_L1, Run, make_run, open_run, record_job, run_dir
from darts_nb.store import results_path

N = 20
CLAIM = 'DARTS vs no surgery (best merges)'
PLACE = 'bias after 256+ context tokens / alone'


def plant(run, key, right):
    "Per-item scores (0/100) of one job on every domain: item i right when `right(d, i)`."
    rows, items = [], []
    for d in DOMAINS:
        vals = [100.0 * bool(right(d, i)) for i in range(N)]
        rows.append(dict(domain=d, metric=METRICS[d], value=float(np.mean(vals)), n=N, stderr=1.0))
        items += [dict(domain=d, metric=METRICS[d], item=f'{d}-{i}', value=v) for i, v in enumerate(vals)]
    record_job(run, dict(key=key, rows=rows, items=items))


def plant_zoo(run, gain):
    "A zoo whose best merge is ta-0.5 and whose DARTS arm wins `gain` points on every domain."
    plant(run, dict(role='merged', merge_config='ta-0.5'), lambda d, i: i < 10)
    plant(run, dict(merge_config='ta-0.5', **NONE.key()), lambda d, i: i < 10)
    plant(run, dict(merge_config='ta-0.5', **STANDARD_L1.key()), lambda d, i: i < 10)
    plant(run, dict(merge_config='ta-0.5', **DARTS.key()), lambda d, i: i < 10 + gain * N / 100)


def placement_text(ratio):
    "A placement.csv as the placement record writes it: every item after 300 context tokens, at `ratio`."
    rows = [f'{d},{d}-{i},300,1.0,{ratio},{ratio}' for d in DOMAINS for i in range(5)]
    return 'domain,item,context_tokens,alone,context,ratio\n' + '\n'.join(rows) + '\n'


def zoos(home, size='toy', gains=(10, 0, -10)):
    "The run `syn` and its replicas `syn-zoo1`, `syn-zoo2` (zoos `size`, `size`-s1, ...), each with its run.json."
    out = []
    for k, g in enumerate(gains):
        name, prof = ('syn', size) if k == 0 else (f'syn-zoo{k}', f'{size}-s{k}')
        run = Run(name, Profile(prof, f'/m/{prof}/base', {d: f'/m/{prof}/{d}' for d in DOMAINS}, zoo_size=size))
        plant_zoo(run, g)
        write_derived(run.dir / 'placement.csv', placement_text(1.0 + 0.1 * (k + 1)), 'remake')
        (run.dir / 'run.json').write_text(json.dumps(dict(profile=asdict(run.profile))))
        out.append(run)
    return out


# 1. rows keyed by zoo name, never by order


@pytest.mark.parametrize('gone', ['store', 'placement'])
def test_a_zoo_without_data_is_said_under_its_own_name(home, gone):
    runs = zoos(home)
    if gone == 'store':
        results_path(runs[1].dir).unlink()
    else:
        (runs[1].dir / 'placement.csv').unlink()
    claim_name = CLAIM if gone == 'store' else PLACE
    t, pooled = replication_table(runs, n_boot=200)
    why = t.loc[claim_name, 'zoo toy-s1']
    assert (
        why.startswith('no data: ') and (str(results_path(runs[1].dir)) if gone == 'store' else 'placement.csv') in why
    )
    # the zoo of seed 2 keeps its own estimate, in its own column: never shifted into seed 1's
    own = t.loc[claim_name, 'zoo toy-s2']
    assert own.startswith('-10.0 pp' if gone == 'store' else '1.30x'), own
    assert [z['name'] for z in pooled[claim_name]['zoos']] == ['toy', 'toy-s2']
    sec = REPLICATION.section(runs[0], home)
    line = next(c for c in sec.core if c.split('— ')[1].startswith(claim_name))
    assert 'pooled over 2 zoos' in line and 'no data from zoo toy-s1' in line, line


def test_the_figure_labels_each_zoo_by_its_name(home, monkeypatch):
    runs = zoos(home)
    results_path(runs[1].dir).unlink()
    _, pooled = replication_table(runs, n_boot=200)
    seen = {}

    def keep(fig, path):
        seen.update({ax.get_title(): [t.get_text() for t in ax.get_yticklabels()] for ax in fig.axes})

    monkeypatch.setattr('darts_nb.replication.save_figure', keep)
    _plot_replication(pooled, home / 'replication.png')
    assert seen[CLAIM] == ['toy', 'toy-s2', 'pooled']
    assert seen[PLACE] == ['toy', 'toy-s1', 'toy-s2', 'pooled']


def test_the_report_of_a_replication_with_a_zoo_gone(home):
    runs = zoos(home)
    results_path(runs[2].dir).unlink()
    text = write_report(runs[0], {'replication': REPLICATION}).read_text()
    assert '| no data: its results store' in text and 'no data from zoo toy-s2' in text


# 2. one rule for derived files: edited or damaged, refused with the file named and what to do


def test_a_hand_edited_replica_placement_is_refused(home):
    runs = zoos(home)
    path = runs[1].dir / 'placement.csv'
    path.write_text(placement_text(9.0))  # a valid table, other numbers: the claim would change silently
    with pytest.raises(DerivedFileError, match=f'{path} was changed since darts wrote it'):
        REPLICATION.section(runs[0], home)
    with pytest.raises(DerivedFileError, match='restore it, or delete it: `darts run --profile toy-s1 --name syn-zoo1'):
        write_report(runs[0], {'replication': REPLICATION})


@pytest.mark.parametrize('garbage', ['\x00\x01 not a table', '', 'domain,context_tokens,ratio\nmath,300,lots\n'])
def test_a_garbage_replica_placement_is_one_line_naming_it(home, garbage):
    runs = zoos(home)
    path = runs[1].dir / 'placement.csv'
    path.unlink()
    (runs[1].dir / 'digests.json').unlink()  # a file from before digests were kept: its content is still checked
    path.write_text(garbage)
    with pytest.raises(DerivedFileError) as e:
        REPLICATION.section(runs[0], home)
    assert str(path) in str(e.value) and '\n' not in str(e.value)


def test_a_garbage_timings_json_is_one_line_from_darts_report(home, capsys, monkeypatch):
    from darts_nb.cli import main

    monkeypatch.setattr('darts_nb.experiments.EXPERIMENTS', {})  # the report's head alone: no section to make
    run = zoos(home, gains=(10,))[0]
    (run.dir / TIMINGS).write_text('{"experts": 1')
    rc, err = main(['report', 'syn']), capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and str(run.dir / TIMINGS) in err[0], err
    assert 'not valid JSON' in err[0] and 'delete it' in err[0] and 'Expecting' not in err[0].split(':')[0]


@pytest.mark.parametrize(
    'content,says', [(b'[1, 2]', 'expected record name -> seconds'), (b'\xff', 'is not UTF-8 text')]
)
def test_a_garbage_timings_json_blocks_no_report_silently(home, content, says):
    run = zoos(home, gains=(10,))[0]
    (run.dir / TIMINGS).write_bytes(content)
    with pytest.raises(DerivedFileError, match=f'{run.dir / TIMINGS}.*{says}'):
        write_report(run, {})


def test_a_hand_edited_timings_json_is_refused_like_run_json(home):
    run = zoos(home, gains=(10,))[0]
    write_derived(run.dir / TIMINGS, json.dumps({'sweep': 100.0}), '')
    (run.dir / TIMINGS).write_text(json.dumps({'sweep': 1.0}))
    with pytest.raises(DerivedFileError, match='timings.json was changed since darts wrote it'):
        write_report(run, {})


def test_a_hand_edited_sweep_csv_is_refused_not_overwritten(home):
    from darts_nb.paper import SWEEP

    run = zoos(home, gains=(10,))[0]
    write_report(run, {'sweep': SWEEP})
    sweep = run.dir / 'sweep.csv'
    edited = sweep.read_text().replace('ta-0.5', 'ta-0.9')
    sweep.write_text(edited)
    with pytest.raises(DerivedFileError, match=f'{sweep} was changed since darts wrote it.*`darts report syn`'):
        write_report(run, {'sweep': SWEEP})
    assert sweep.read_text() == edited  # the user's edit is not silently replaced either
    sweep.unlink()
    write_report(run, {'sweep': SWEEP})  # deleted: the report writes it again from the store
    assert 'ta-0.5' in sweep.read_text()


# 3. missing data said as missing, never as NaN


def test_deleted_item_rows_are_said_missing_not_nan(home):
    from darts_nb.experiments import EXPERIMENTS

    run = zoos(home, gains=(10,))[0]
    with sqlite3.connect(results_path(run.dir)) as con:
        con.execute('DELETE FROM items')
    text = write_report(run, {n: EXPERIMENTS[n] for n in ('sweep', 'main')}).read_text()
    assert 'nan' not in text.lower(), [line for line in text.splitlines() if 'nan' in line.lower()]
    assert 'missing (no items)' in text


def test_a_replication_with_no_items_left_is_said_missing(home):
    runs = zoos(home)
    for r in runs:
        with sqlite3.connect(results_path(r.dir)) as con:
            con.execute('DELETE FROM items')
    t, _ = replication_table(runs, n_boot=100)
    assert CLAIM not in t.index  # no zoo has items for it: no row, and no '+nan'
    assert 'nan' not in t.to_string().lower()


# 4. the suggested command reopens the same run


def _reopen(command: str) -> Run:
    "Run `command`'s options through darts' own parser into make_run (what `darts run` would open)."
    from darts_nb.cli import _parser
    from darts_nb.options import options_from_args

    argv = shlex.split(command)
    assert argv[:2] == ['darts', 'run'], argv
    a = _parser().parse_args(argv[1:])
    return make_run(options_from_args(a))


@pytest.fixture
def session_runs():
    "Run names in the session's DARTS_HOME (where the ci zoo is built), removed after the test."
    names = []
    yield lambda n: names.append(f'{n}-{os.getpid()}') or names[-1]
    for n in names:
        shutil.rmtree(run_dir(n), ignore_errors=True)


def test_the_suggested_command_reopens_a_ci_run(session_runs):
    name = session_runs('faults-rerun')
    run = make_run('ci', name, quick=True, eval_limit=8)
    text = write_report(open_run(name), {'replication': REPLICATION}).read_text()
    command = rerun_command(run, 'replication')
    assert f'`{command}`' in text and '--profile ci' in command and '--eval-limit 8' in command
    again = _reopen(command)  # no refusal, no advice to delete the run
    assert (again.content_key, again.options.quick, again.options.eval_limit) == (run.content_key, True, 8)


def test_the_suggested_command_reopens_a_run_of_ones_own_profile(session_runs, tmp_path):
    ci = get_profile('ci')
    yaml = tmp_path / 'mine.yaml'
    yaml.write_text(json.dumps(dict(name='mine', base=ci.base, experts=ci.experts, eval='toy')))
    name = session_runs('faults-own')
    run = make_run(str(yaml), name, eval_limit=5)
    write_report(run, {'replication': REPLICATION})
    yaml.unlink()  # the user's file is gone: the run's own profile.yaml reopens it
    command = rerun_command(run, 'sweep')
    assert f'--profile {run.dir}/profile.yaml' in command
    assert _reopen(command).content_key == run.content_key


# 5. the recipe's own name


def test_ci_replicas_are_zoos_of_the_ci_recipe(home):
    runs = zoos(home, size='ci')
    sec = REPLICATION.section(runs[0], home)
    text = ' '.join(sec.core + sec.notes)
    assert 'zoos of the ci recipe' in text and 'toy' not in text, text
    line = REPLICATION.unmeasured(runs[0])
    assert '3 zoos of the ci recipe' in line and '--profile ci' in line


# 6. the models key: the checkpoints' content, not their paths or times


def _copy_zoo(dst: Path) -> tuple[Profile, Profile]:
    "A copy of the session's ci zoo (its four checkpoints) at `dst`, as a profile; and the ci profile."
    ci = get_profile('ci')
    paths = {r: shutil.copytree(p, dst / r) for r, p in ci.paths.items()}
    return Profile('mine', str(paths['base']), {d: str(paths[d]) for d in ci.experts}), ci


def test_models_key_is_the_checkpoints_content(tmp_path):
    prof, ci = _copy_zoo(tmp_path / 'a')
    key = models_key(ci)
    assert models_key(prof) == key  # another path, other file times
    code = Path(prof.experts['code'])
    os.utime(code / 'model.safetensors', (1, 1))  # touched
    moved = tmp_path / 'b'
    (tmp_path / 'a').rename(moved)  # moved
    prof = Profile('mine', str(moved / 'base'), {d: str(moved / d) for d in ci.experts})
    tok = moved / 'code' / 'tokenizer_config.json'
    tok.write_text(json.dumps({**json.loads(tok.read_text()), 'is_local': True, 'extra_note': 'rebuilt'}))
    (moved / 'code' / 'zoo.json').write_text(json.dumps({'seconds': 1.0}))  # another training time
    assert models_key(prof) == key
    w = moved / 'code' / 'model.safetensors'
    data = bytearray(w.read_bytes())
    data[-1] ^= 1  # one weight byte
    w.write_bytes(bytes(data))
    assert models_key(prof) != key


def test_a_rebuilt_expert_reopens_its_run(session_runs, tmp_path):
    prof, _ = _copy_zoo(tmp_path / 'zoo')
    yaml = tmp_path / 'mine.yaml'
    yaml.write_text(json.dumps(dict(name='mine', base=prof.base, experts=prof.experts, eval='toy')))
    name = session_runs('faults-rebuilt')
    run = make_run(str(yaml), name, eval_limit=5)
    code = Path(prof.experts['code'])
    files = {f.name: f.read_bytes() for f in code.iterdir()}
    shutil.rmtree(code)  # the expert deleted, then rebuilt: the same weights, new files, two new tokenizer keys
    code.mkdir()
    for n, b in files.items():
        (code / n).write_bytes(b)
    tok = code / 'tokenizer_config.json'
    tok.write_text(json.dumps({**json.loads(tok.read_text()), 'backend': 'tokenizers', 'is_local': True}))
    assert make_run(str(yaml), name, eval_limit=5).content_key == run.content_key


def test_a_run_recorded_with_an_old_fingerprint_key_keeps_it(session_runs, tmp_path):
    prof, _ = _copy_zoo(tmp_path / 'zoo')
    yaml = tmp_path / 'mine.yaml'
    yaml.write_text(json.dumps(dict(name='mine', base=prof.base, experts=prof.experts, eval='toy')))
    name = session_runs('faults-old-key')
    run = make_run(str(yaml), name, eval_limit=5)
    meta = run.dir / 'run.json'
    m = json.loads(meta.read_text())
    old = fingerprint_models_key(run.profile)  # what an older darts_nb recorded
    inputs = run_inputs(run.profile, old, eval_limit=5)
    m = {**m, 'models_key': old, 'inputs': inputs, 'content_key': stable_hash(inputs)}
    m.pop('record_key')
    meta.write_text(json.dumps({**m, 'record_key': stable_hash(m)}))
    again = make_run(str(yaml), name, eval_limit=5)
    assert (again.models_key, again.content_key) == (old, stable_hash(inputs))
    code = Path(prof.experts['code'])
    os.utime(code / 'config.json', (1, 1))  # an old key cannot see past file times: refused, said clearly
    with pytest.raises(ValueError, match='older than content keys also sees a moved or rebuilt zoo'):
        make_run(str(yaml), name, eval_limit=5)
