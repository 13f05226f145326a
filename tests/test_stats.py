"Bad-input table and end-to-end checks for darts_nb.stats (fast)."

import numpy as np
import pandas as pd
import pytest
from darts_nb.stats import (
    paper_table,
    scores_frame,
    compare_methods,
    paired_tests,
    mixed_effects,
    simulate_scores,
    long_frame,
)

GOOD = simulate_scores(2.0, seed_sd=1.0, seed=3)


@pytest.mark.parametrize(
    'call, exc, words',
    [
        (lambda: paper_table('table99'), ValueError, 'table99'),
        (lambda: compare_methods(GOOD, 'zz', 'b'), ValueError, "a: expected one of ['a', 'b'], got 'zz'"),
        (lambda: compare_methods(GOOD, 'a', 'zz'), ValueError, "b: expected one of ['a', 'b'], got 'zz'"),
        (lambda: compare_methods(GOOD[GOOD.seed < 1], 'a', 'b'), ValueError, 'at least 2 seeds'),
        (lambda: compare_methods(GOOD.drop(columns='score'), 'a', 'b'), ValueError, 'score'),
        (lambda: compare_methods(pd.concat([GOOD, GOOD.head(1)]), 'a', 'b'), ValueError, 'duplicated'),
        (lambda: compare_methods(GOOD.iloc[1:], 'a', 'b'), ValueError, 'lack some tasks'),
        (lambda: compare_methods(GOOD.assign(score=np.nan), 'a', 'b'), ValueError, 'non-finite'),
        (lambda: compare_methods([1, 2], 'a', 'b'), TypeError, 'DataFrame'),
        (lambda: paired_tests(GOOD, 'a', 'q'), ValueError, "b: expected one of ['a', 'b'], got 'q'"),
        (lambda: paired_tests(GOOD[GOOD.seed < 1], 'a', 'b'), ValueError, 'need at least 2'),
        (lambda: mixed_effects(GOOD[GOOD.method == 'a']), ValueError, 'at least 2 methods'),
        (lambda: mixed_effects(GOOD[GOOD.seed < 2]), ValueError, 'at least 3 seeds'),
        (lambda: mixed_effects(GOOD[GOOD.task == 'math']), ValueError, 'at least 2 tasks'),
        (lambda: mixed_effects(GOOD, b='zz'), ValueError, "b: expected one of ['a', 'b'], got 'zz'"),
        (lambda: scores_frame('x'), TypeError, 'DataFrame'),
        (lambda: scores_frame(pd.DataFrame({'seed': [0]})), ValueError, 'domain'),
    ],
)
def test_bad_input(call, exc, words):
    with pytest.raises(exc, match=None) as e:
        call()
    assert words in str(e.value)


def test_store_end_to_end(tmp_path):
    "Rows recorded in the results store come back through scores_frame and the three analyses."
    from darts_nb.store import record, load_results

    rows = [
        dict(
            role='surgered',
            surgery_kind=('darts' if r.method == 'a' else 'standard'),
            loss='l1',
            seed=int(r.seed),
            domain=r.task,
            metric='score',
            value=float(r.score),
        )
        for r in GOOD.itertuples()
    ]
    record(tmp_path / 'run', rows)
    rows.append(dict(role='merged', seed=0, domain='math', metric='score', value=1.0))
    record(tmp_path / 'run', rows[-1:])
    df = scores_frame(load_results(tmp_path / 'run'), method='surgery_kind', roles=['surgered'])
    assert sorted(set(df.method)) == ['darts', 'standard']
    assert len(df) == len(GOOD)
    c = compare_methods(df, 'darts', 'standard')
    assert c.mean_diff[0] == pytest.approx(2.0, abs=1.5)
    assert c.p_greater[0] < 0.05
    assert (paired_tests(df, 'darts', 'standard').mean_diff > 0).all()
    me = mixed_effects(df, b='standard').set_index('term')
    assert me.loc['method[darts]', 'p'] < 0.01


def test_table4_reproduces():
    t4 = paper_table('table4')
    df = pd.concat([long_frame(t4[['seed', c]], c) for c in ('DARTS', 'Standard + L1')])
    c = compare_methods(df, 'DARTS', 'Standard + L1')
    assert c.test[0] == 'mannwhitneyu'
    assert c.statistic[0] == 36.0
    assert round(c.p_two_sided[0], 3) == 0.002
    # swapping the roles flips U and the one-sided p-values, not the two-sided one
    s = compare_methods(df, 'Standard + L1', 'DARTS')
    assert s.statistic[0] == 0.0
    assert s.p_two_sided[0] == pytest.approx(c.p_two_sided[0])
    assert s.p_less[0] == pytest.approx(c.p_greater[0])


def test_ttest_branch_when_normal():
    rng = np.random.default_rng(0)
    df = pd.DataFrame(
        [dict(method=m, seed=s, task='t', score=rng.normal(5 if m == 'a' else 0, 1)) for m in 'ab' for s in range(20)]
    )
    c = compare_methods(df, 'a', 'b')
    assert c.test[0] == 'ttest_welch'
    assert c.p_greater[0] < 1e-6
    assert c.df[0] > 0
    assert compare_methods(df, 'a', 'b', equal_var=True).test[0] == 'ttest_student'


def test_mixed_effects_labels_with_regex_characters():
    "Method labels such as 'Standard + L1' (a '+') still give readable term names."
    df = simulate_scores(1.0).replace({'method': {'a': 'DARTS', 'b': 'Standard + L1'}})
    me = mixed_effects(df, b='Standard + L1').set_index('term')
    assert 'method[DARTS]' in me.index
    assert me.loc['method[DARTS]', 'coef'] > 0
