"The darts command: no hidden costs (a report never builds a zoo, merge only merges), and the layout check itself."

import os
import subprocess
import sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'tools'))
import check_layout  # noqa: E402 (found through the path set above)


def darts(*args, home):
    env = {**os.environ, 'DARTS_HOME': str(home), 'HF_HUB_OFFLINE': '1', 'HF_DATASETS_OFFLINE': '1'}
    return subprocess.run(
        [sys.executable, '-m', 'darts_nb.cli', *args], capture_output=True, text=True, env=env, cwd=ROOT
    )


def test_report_of_a_missing_run_fails_at_once_and_builds_nothing(tmp_path):
    r = darts('report', 'nosuchrun', home=tmp_path)
    assert r.returncode != 0, r.stderr
    assert "run 'nosuchrun' does not exist" in r.stderr, r.stderr
    assert not any(p.name.startswith('zoo') for p in tmp_path.iterdir())  # no zoo was built
    assert not (tmp_path / 'runs' / 'nosuchrun').exists()


def test_merge_merges_and_scores_nothing(monkeypatch):
    from darts_nb.cli import main
    from darts_nb.runs import run_dir, merges_dir, models_key, Run
    from darts_nb.zoo import get_profile

    assert (
        main(['merge', '--profile', 'ci', '--quick', '--only', 'ta-0.5']) == 0
    )  # the ci zoo is built in the test home by `make test`
    prof = get_profile('ci')
    assert (merges_dir(Run('x', prof, models_key=models_key(prof))) / 'ta-0.5' / 'merge.yaml').exists()
    assert not (run_dir('merge') / 'results.sqlite').exists()
    assert not (run_dir('merge') / 'run.json').exists()


def test_only_without_names_is_refused(capsys):
    from darts_nb.cli import main

    with pytest.raises(SystemExit) as e:
        main(['run', '--only'])
    assert e.value.code == 2
    assert 'expected at least one argument' in capsys.readouterr().err


def test_the_library_has_no_import_cycle():
    assert check_layout.find_cycle(check_layout.graph()) is None
    assert check_layout.find_cycle({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': set()}) == [
        'a',
        'b',
        'c',
        'a',
    ]  # the check can fail
    assert check_layout.main([]) == 0


def test_surgery_prints_both_scores_and_the_paired_difference():
    "darts surgery on the ci zoo (a few steps and items): both scores with standard errors, the paired difference."
    import shutil
    from darts_nb.runs import run_dir

    name = 'cli-surgery-test'
    shutil.rmtree(run_dir(name), ignore_errors=True)
    try:
        r = darts(
            'surgery',
            '--profile',
            'ci',
            '--merge',
            'ta-0.5',
            '--domain',
            'math',
            '--iters',
            '2',
            '--eval-limit',
            '4',
            '--name',
            name,
            home=os.environ.get('DARTS_HOME', ROOT / '.darts_home'),
        )
        assert r.returncode == 0, r.stderr[-2000:]
        lines = r.stdout.strip().splitlines()
        assert lines[0] == 'math on ta-0.5:', lines
        assert any(line.strip().startswith('exact_match') and '±' in line and '(n=4)' in line for line in lines), lines
        assert any('difference (with - without, paired over 4 items)' in line and '95% CI' in line for line in lines)
        assert lines[-1].startswith('module saved in ')
        assert Path(lines[-1][len('module saved in ') :]).is_dir()
        assert '\r' not in r.stderr  # a log, not a terminal: progress as lines
    finally:
        shutil.rmtree(run_dir(name), ignore_errors=True)
