"Jobs computed in worker processes give the same recorded results as jobs computed in the driver."

import shutil
from darts_nb.runs import make_run, run_dir, stage_experts, task_rows


def _experts_scores(name: str, workers: int):
    shutil.rmtree(run_dir(name), ignore_errors=True)  # a fresh run: nothing recorded, every job computed
    run = make_run('ci', name, quick=True, eval_limit=3, workers=workers)
    try:
        stage_experts(run)
    finally:
        run.close()
    return task_rows(run).set_index(['merge_config', 'domain']).value.sort_index()


def test_workers_match_the_driver():
    one, two = _experts_scores('test-workers-1', 1), _experts_scores('test-workers-2', 2)
    assert len(one) == 12
    assert one.index.equals(two.index)  # 4 models x 3 domains
    assert (one == two).all(), (one, two)
