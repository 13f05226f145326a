"--delete-merges: the sweep scores every merge and keeps none; an arm that needs a merge makes it again, the same."

import shutil
from darts_nb.runs import make_run, run_dir, stage_sweep, sweep_table, merges_dir, run_arm, NONE
from darts_nb.merge import is_finished


def test_sweep_without_keeping_merges(tmp_path):
    shutil.rmtree(run_dir('test-delete-merges'), ignore_errors=True)
    # two merges at a time on disk, scored in worker processes; the merges in a folder of this test's own (shared_dir):
    # the session's ci merges are used by tests running beside this one (make test runs files in parallel)
    run = make_run(
        'ci', 'test-delete-merges', quick=True, eval_limit=2, keep_merges=False, workers=2, shared_dir=str(tmp_path)
    )
    assert merges_dir(run).parent == tmp_path / 'merges'
    shutil.rmtree(merges_dir(run), ignore_errors=True)  # this run's merges are made here, not reused
    try:
        stage_sweep(run)
        t = sweep_table(run)
        assert len(t) == 4
        assert t[['code', 'math', 'instruct']].notna().all().all()  # one merge per family, every domain scored
        assert not any(is_finished(merges_dir(run) / n) for n in t.index)  # none left on disk
        rows = run_arm(run, 'ta-0.5', 'math', NONE)  # needs ta-0.5 again: merged again
        assert is_finished(merges_dir(run) / 'ta-0.5')
        assert len(rows)
    finally:
        run.close()
