"The experiments module without training: bad inputs, and the report built from a synthetic results store."
import os
import pytest
from dataclasses import replace
from darts_nb.experiments import ABLATIONS, EXPERIMENTS, run_all, seed_frame, main_table
from darts_nb.runs import Arm, DARTS, STANDARD_L1, NONE, PAPER_SEEDS, Run, make_run, arm_scores
from darts_nb.report import side_by_side, paper_rows, write_report as render_report
from darts_nb.store import record

def write_report(run): return render_report(run, EXPERIMENTS)
from darts_nb.zoo import Profile

@pytest.mark.parametrize('kw,msg', [
    (dict(kind='lora'), "kind='lora'"), (dict(loss='mse'), "loss='mse'"), (dict(rank=0), 'rank=0'),
    (dict(iters=1.5), 'iters=1.5'), (dict(calib_n=True), 'calib_n=True'), (dict(lr=-1e-3), 'lr=-0.001'),
])
def test_arm_bad_inputs(kw, msg):
    with pytest.raises(ValueError, match=msg.replace('(', r'\(').replace('.', r'\.')): Arm(**kw)

@pytest.mark.parametrize('kw,msg', [(dict(name='a/b'), "name='a/b'"), (dict(name=''), "name=''"), (dict(name='..'), "name='..'"),
                                    (dict(name='x', eval_limit=0), 'eval_limit=0')])
def test_make_run_bad_inputs(kw, msg):
    with pytest.raises(ValueError, match=msg): make_run('ci', **kw)  # refused before any zoo is built

def test_run_all_unknown_experiment(tmp_path, monkeypatch):
    monkeypatch.setenv('DARTS_HOME', str(tmp_path))
    with pytest.raises(ValueError, match=r"\['tables'\]"): run_all('ci', 'x', only=['tables'])
    assert not (tmp_path/'zoo-ci').exists()  # nothing was built

DOM = ('code', 'math', 'instruct')
METRIC = {'code': 'pass@1', 'math': 'exact_match', 'instruct': 'win_rate'}

def fake_run(tmp_path, monkeypatch, darts_gain: float) -> Run:
    "A run whose store says DARTS beats Standard + L1 by `darts_gain` points in every seed and task."
    monkeypatch.setenv('DARTS_HOME', str(tmp_path))
    run = Run('fake', Profile('fake', '/m/base', {d: f'/m/{d}' for d in DOM}))
    rows = [dict(role='base' if m == 'base' else 'expert', merge_config=m, domain=d, metric=METRIC[d],
                 value=90. if m == d else 1., n=60) for m in ('base', *DOM) for d in DOM]
    rows += [dict(role='merged', merge_config=c, domain=d, metric=METRIC[d], value=v + i, n=60)
             for c, v in (('ta-0.5', 30.), ('linear-equal', 10.)) for i, d in enumerate(DOM)]
    for s in PAPER_SEEDS:
        for arm, base in ((replace(DARTS, seed=s), 40. + darts_gain), (replace(STANDARD_L1, seed=s), 40.)):
            rows += [dict(merge_config='ta-0.5', domain=d, metric=METRIC[d], value=base + i + (s % 5) / 10, n=60, **arm.key())
                     for i, d in enumerate(DOM)]
    rows += [dict(merge_config='ta-0.5', domain=d, metric=METRIC[d], value=30. + i, n=60, **NONE.key()) for i, d in enumerate(DOM)]
    rows += [dict(merge_config='ta-0.5', domain=d, metric='rho_l1', value=20., n=100, **DARTS.key()) for d in DOM]
    record(run.dir, rows, profile='fake')
    return run

def test_report_from_synthetic_store(tmp_path, monkeypatch):
    run = fake_run(tmp_path, monkeypatch, darts_gain=2.0)
    long = seed_frame(run)
    assert len(long) == 2 * len(PAPER_SEEDS) * 3 and set(long.method) == {'DARTS', 'Standard + L1'}
    text = write_report(run).read_text()
    for part in ('## Configuration', 'Table 2: individual models', 'Table 1: main results', 'Table 4: average score per seed',
                 'Table 14', 'Table 15', 'Mixed-effects', 'Section 6.2'):
        assert part in text, part
    assert '**AGREES** — DARTS beats Standard + L1 on the per-seed average in every seed: 6 of 6' in text
    assert '**AGREES** — DARTS is significantly better than Standard + L1 over seeds' in text
    assert 'Figure 1' not in text and 'Table 8' not in text  # not run: left out, not faked
    assert (run.dir/'report.html').read_text().count('<table>') >= 5 and (run.dir/'figures'/'seeds.png').exists()

def test_report_says_when_the_run_disagrees(tmp_path, monkeypatch):
    text = write_report(fake_run(tmp_path, monkeypatch, darts_gain=-2.0)).read_text()
    assert '**DISAGREES** — DARTS beats Standard + L1 on the per-seed average in every seed: 0 of 6' in text
    assert '**DISAGREES** — DARTS is significantly better than Standard + L1 over seeds' in text

def test_rows_line_up_with_the_published_tables():
    for name, ab in ABLATIONS.items():
        if ab.paper: assert {l for l, _ in ab.arms} <= set(paper_rows(ab.paper, ab.key).index), name
    t1 = paper_rows('table1', ('merge', 'surgery'))
    assert 'Task Arithmetic / DARTS' in t1.index and t1.loc['Task Arithmetic / DARTS', 'Avg (paper)'] == 42.3

def test_surgery_summary(tmp_path, monkeypatch):
    from darts_nb.experiments import surgery_summary
    run = fake_run(tmp_path, monkeypatch, darts_gain=1.0)
    (title, rho), = surgery_summary(run)  # the store has rho_L1 of DARTS only, no agreement rows
    assert 'rho_L1' in title and list(rho.index) == ['DARTS'] and (rho.loc['DARTS'] == 20.).all()
