"The registry and the report without training: bad inputs, and the report built from a synthetic results store."

import numpy as np
import pandas as pd
import pytest
from dataclasses import replace
from darts_nb.experiments import EXPERIMENTS, run_all
from darts_nb.ablations import ABLATIONS
from darts_nb.paper import seed_frame
from darts_nb.premises import position_table, placement_table
from darts_nb.runs import Arm, DARTS, STANDARD_L1, NONE, PAPER_SEEDS, Run, make_run
from darts_nb.results import arm_key, paired_diff
from darts_nb.report import paper_rows, write_report as render_report
from darts_nb.store import record
from darts_nb.zoo import Profile


def write_report(run):
    return render_report(run, EXPERIMENTS)


@pytest.mark.parametrize(
    'kw,msg',
    [
        (dict(kind='lora'), "kind: expected one of \\[[^]]*\\], got 'lora'"),
        (dict(loss='mse'), "loss: expected one of \\[[^]]*\\], got 'mse'"),
        (dict(rank=0), 'rank: expected an integer >= 1, got 0'),
        (dict(iters=1.5), 'iters: expected an integer >= 1, got 1.5'),
        (dict(calib_n=True), 'calib_n: expected an integer >= 1, got True'),
        (dict(lr=-1e-3), 'lr: expected a finite number > 0, got -0.001'),
        (dict(calib_text='answers'), "calib_text: expected one of \\[[^]]*\\], got 'answers'"),
    ],
)
def test_arm_bad_inputs(kw, msg):
    with pytest.raises(ValueError, match=msg.replace('(', r'\(').replace('.', r'\.')):
        Arm(**kw)


@pytest.mark.parametrize(
    'kw,msg',
    [
        (dict(name='a/b'), "name: expected a plain directory name, got 'a/b'"),
        (dict(name=''), "name: expected a plain directory name, got ''"),
        (dict(name='..'), r"name: expected a plain directory name, got '\.\.'"),
        (dict(name='x', eval_limit=0), 'eval_limit: expected an integer >= 1 or None, got 0'),
    ],
)
def test_make_run_bad_inputs(kw, msg):
    with pytest.raises(ValueError, match=msg):
        make_run('ci', **kw)  # refused before any zoo is built


def test_run_all_unknown_experiment(tmp_path, monkeypatch):
    monkeypatch.setenv('DARTS_HOME', str(tmp_path))
    with pytest.raises(ValueError, match=r"\['tables'\]"):
        run_all('ci', 'x', only=['tables'])
    with pytest.raises(ValueError, match=r'only: expected at least one of .*, got \[\]'):
        run_all('ci', 'x', only=[])
    assert not (tmp_path / 'zoo-ci').exists()  # nothing was built


DOM = ('code', 'math', 'instruct')
METRIC = {'code': 'pass@1', 'math': 'exact_match', 'instruct': 'win_rate'}
N_ITEMS = 60


def _items(rng, p: float) -> list[dict]:
    "N_ITEMS per-item scores (0 or 100) with success rate p, the same item ids for every arm."
    return [dict(item=f'i{k}', value=100.0 * (rng.random() < p)) for k in range(N_ITEMS)]


def fake_run(tmp_path, monkeypatch, darts_gain: float) -> Run:
    "A run whose store says DARTS beats Standard + L1 by `darts_gain` points in every seed and task, with item scores."
    monkeypatch.setenv('DARTS_HOME', str(tmp_path))
    run = Run('fake', Profile('fake', '/m/base', {d: f'/m/{d}' for d in DOM}))
    rng = np.random.default_rng(0)
    rows = [
        dict(
            role='base' if m == 'base' else 'expert',
            merge_config=m,
            domain=d,
            metric=METRIC[d],
            value=90.0 if m == d else 1.0,
            n=60,
            stderr=3.0,
        )
        for m in ('base', *DOM)
        for d in DOM
    ]
    rows += [
        dict(role='merged', merge_config=c, domain=d, metric=METRIC[d], value=v + i, n=60)
        for c, v in (('ta-0.5', 30.0), ('linear-equal', 10.0))
        for i, d in enumerate(DOM)
    ]
    record(run.dir, rows, profile='fake')
    base = rng.random((N_ITEMS, len(DOM))) < 0.4  # which items the merge gets right
    for s in PAPER_SEEDS:
        for arm, gain in ((replace(DARTS, seed=s), darts_gain), (replace(STANDARD_L1, seed=s), 0.0)):
            for i, d in enumerate(DOM):
                flip = (
                    rng.random(N_ITEMS) < abs(gain) / 100 * 3
                )  # a paired improvement (or loss) of about `gain` points
                sc = np.where(flip, gain > 0, base[:, i]) * 100.0
                record(
                    run.dir,
                    dict(metric=METRIC[d], value=float(sc.mean()), n=N_ITEMS, stderr=6.0),
                    items=[dict(metric=METRIC[d], item=f'i{k}', value=float(v)) for k, v in enumerate(sc)],
                    merge_config='ta-0.5',
                    domain=d,
                    profile='fake',
                    **arm.key(),
                )
    for i, d in enumerate(DOM):
        sc = base[:, i] * 100.0
        record(
            run.dir,
            dict(metric=METRIC[d], value=float(sc.mean()), n=N_ITEMS),
            items=[dict(metric=METRIC[d], item=f'i{k}', value=float(v)) for k, v in enumerate(sc)],
            merge_config='ta-0.5',
            domain=d,
            profile='fake',
            **NONE.key(),
        )
        record(
            run.dir, merge_config='ta-0.5', domain=d, metric='rho_l1', value=20.0, n=100, profile='fake', **DARTS.key()
        )
    return run


def test_report_from_synthetic_store(tmp_path, monkeypatch):
    run = fake_run(tmp_path, monkeypatch, darts_gain=8.0)
    long = seed_frame(run)
    assert len(long) == 2 * len(PAPER_SEEDS) * 3
    assert set(long.method) == {'DARTS', 'Standard + L1'}
    text = write_report(run).read_text()
    for part in (
        '## The core claims',
        '## Configuration',
        'Table 2: individual models',
        'Table 1: main results',
        'Table 4: average score per seed',
        'Table 14',
        'Table 15',
        'Mixed-effects',
        'Section 6.2',
    ):
        assert part in text, part
    assert '**AGREES** — DARTS beats Standard + L1 on the per-seed average' in text
    assert 'ahead in 6 of 6 seeds' in text
    assert '**AGREES** — DARTS is significantly better than Standard + L1 over seeds' in text
    assert '**AGREES** — DARTS beats Standard + L1 on the best merges' in text  # the core claim, paired over items
    assert '90.0 ± 3.0' in text  # scores carry their uncertainty
    assert 'Figure 1' not in text
    assert 'Table 8' not in text  # not run: left out, not faked
    assert (run.dir / 'report.html').read_text().count('<table>') >= 5
    assert (run.dir / 'figures' / 'seeds.png').exists()


def test_report_says_when_the_run_disagrees(tmp_path, monkeypatch):
    text = write_report(fake_run(tmp_path, monkeypatch, darts_gain=-8.0)).read_text()
    assert '**DISAGREES** — DARTS beats Standard + L1 on the per-seed average' in text
    assert '**DISAGREES** — DARTS is significantly better than Standard + L1 over seeds' in text


def test_no_difference_is_inconclusive(tmp_path, monkeypatch):
    run = fake_run(tmp_path, monkeypatch, darts_gain=0.0)
    r = paired_diff(run, [(arm_key('ta-0.5', DARTS), arm_key('ta-0.5', STANDARD_L1))])
    assert r['diff'] == 0
    assert r['lo'] <= 0 <= r['hi']
    assert '**INCONCLUSIVE** — DARTS beats Standard + L1 on the best merges' in write_report(run).read_text()


def test_rows_line_up_with_the_published_tables():
    for name, ab in ABLATIONS.items():
        if ab.paper:
            assert {label for label, _ in ab.arms} <= set(paper_rows(ab.paper, ab.key).index), name
    t1 = paper_rows('table1', ('merge', 'surgery'))
    assert 'Task Arithmetic / DARTS' in t1.index
    assert t1.loc['Task Arithmetic / DARTS', 'Avg (paper)'] == 42.3


def test_position_and_placement_tables():
    frames = {
        'DARTS': pd.DataFrame(
            {
                'item': range(8),
                'bucket': ['0-127'] * 4 + ['256-383'] * 4,
                'before': 2.0,
                'after': 1.0,
                'agree': 3.0,
                'tokens': 4,
            }
        )
    }
    rho, agr = position_table(frames)
    assert rho.loc['DARTS', '0-127'].startswith('50.0 [50.0, 50.0]')
    assert agr.loc['DARTS', '256-383'].startswith('75.0')
    df = pd.DataFrame(
        {
            'domain': 'math',
            'item': range(6),
            'context_tokens': [0, 10, 20, 300, 310, 320],
            'alone': 1.0,
            'context': [1.0, 1.0, 1.0, 2.0, 2.0, 2.0],
            'ratio': [1.0, 1.0, 1.0, 2.0, 2.0, 2.0],
        }
    )
    t = placement_table(df)
    assert list(t.index) == ['0-127', '256-383']
    assert t.loc['256-383', 'ratio'] == pytest.approx(2.0)
    assert t.loc['0-127', 'items'] == 2
