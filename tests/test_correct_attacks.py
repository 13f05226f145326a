"""`darts correct` attacked as an unlucky or careless user would (issue 38): its output folder, its modules, its end.

The output folder is one whole (`correction_folder`): a rerun for another merge replaces all of it, a second writer
is refused, a run killed (SIGKILL) or stopped (Ctrl-C) leaves the folder as it was and nothing that a later run keeps.
A module that is worse than no module is said in the summary, the card and the command's last line, and is not saved
with --skip-worse. Repeated flags are all kept."""

import json
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
import pytest
from darts_nb.checkpoints import load_model
from darts_nb.correct import attach_corrections
from darts_nb.merge import run_merges, ta_config
from test_bad_inputs_cli import run_main


@pytest.fixture(scope='module')
def merges(zoo, tmp_path_factory):
    "Two task-arithmetic merges of the ci zoo's maths and code experts (weights 0.5 and 0.3), made with mergekit."
    out = tmp_path_factory.mktemp('merges')
    experts = {d: zoo / d for d in ('math', 'code')}
    configs = {f'ta-{w}': ta_config(zoo / 'base', experts, w) for w in (0.5, 0.3)}
    res = run_merges(configs, out, progress=False)
    assert list(res.status) == ['done', 'done'], res
    return {name: out / name for name in configs}


SMALL = ['--n-calib', '8', '--n-held', '4', '--device', 'cpu']


def correct_line(merged, experts: dict, out, *more) -> list[str]:
    "The arguments of `darts correct` for `merged` and `experts` (one --expert flag each), small, into `out`."
    line = ['correct', '--merged', str(merged)]
    for d, p in experts.items():
        line += ['--expert', f'{d}={p}']
    return line + SMALL + ['--out', str(out), *more]


def temporaries_of(out: Path) -> list[str]:
    "What a writer of `out` left beside it: its temporaries and their leases."
    return sorted(p.name for p in out.parent.glob(f'.{out.name}.tmp-*'))


def test_every_expert_flag_is_kept(zoo, merges, tmp_path):
    "`--expert math=A --expert code=B`: both experts are diagnosed (argparse alone kept the last flag only)."
    both = {'math': zoo / 'math', 'code': zoo / 'code'}
    code, said, err = run_main(correct_line(merges['ta-0.5'], both, tmp_path / 'both', '--diagnose-only'))
    assert code == 0, err[-2000:]
    summary = (tmp_path / 'both' / 'summary.md').read_text()
    assert '- math: ' in summary and '- code: ' in summary, summary


def test_rerun_for_another_merge_replaces_everything(zoo, merges, tmp_path):
    "A rerun into the same folder for another merge and one expert: no module, router or export of the first is left."
    out = tmp_path / 'fixed'
    both = {'math': zoo / 'math', 'code': zoo / 'code'}
    code, said, err = run_main(correct_line(merges['ta-0.5'], both, out, '--iters', '5', '--export'))
    assert code == 0, err[-2000:]
    assert {'math', 'code', 'router', 'math-corrected', 'code-corrected'} <= {p.name for p in out.iterdir()}
    code, said, err = run_main(correct_line(merges['ta-0.3'], {'math': zoo / 'math'}, out, '--iters', '5'))
    assert code == 0, err[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ['darts_correct.json', 'diagnosis.png', 'math', 'summary.md']
    assert json.loads((out / 'math' / 'surgery_config.json').read_text())['merged_model'] == str(merges['ta-0.3'])
    assert json.loads((out / 'darts_correct.json').read_text())['inputs']['merged'] == str(merges['ta-0.3'])
    model, _ = load_model(merges['ta-0.3'], device='cpu')
    assert attach_corrections(model, out) == ['math']  # never the code module trained for ta-0.5
    assert temporaries_of(out) == []


def test_a_module_worse_than_none_is_said_and_can_be_skipped(zoo, merges, tmp_path):
    "--lr 1 (a thousand times the paper's): the summary, the card and the last line say it; --skip-worse saves none."
    out = tmp_path / 'fixed'
    argv = correct_line(merges['ta-0.5'], {'math': zoo / 'math'}, out, '--iters', '30', '--lr', '1')
    code, said, err = run_main(argv)
    assert code == 0, err[-2000:]
    assert 'math: WORSE THAN NO MODULE on the held-out prompts' in (out / 'summary.md').read_text()
    assert '| held-out verdict | WORSE THAN NO MODULE: ' in (out / 'math' / 'README.md').read_text()
    last = said.strip().splitlines()[-1]
    assert last.startswith('darts correct: warning: the math module is worse than no module: '), said[-500:]
    assert 'do not use it' in last, last
    code, said, err = run_main(argv + ['--skip-worse'])
    assert code == 0, err[-2000:]
    assert not (out / 'math').exists() and 'not saved (--skip-worse)' in said.strip().splitlines()[-1]
    assert 'The module is not saved (skip_worse)' in (out / 'summary.md').read_text()


def test_a_second_writer_is_refused(zoo, merges, tmp_path):
    "A correction writing the folder now (a live process holding the lease): a second one stops at once, one line."
    from darts_nb.lease import host_id, lease_path

    out = tmp_path / 'fixed'
    writer = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])
    try:
        tmp = tmp_path / '.fixed.tmp-1-aa'
        tmp.mkdir()
        beat = dict(host=host_id(), pid=writer.pid, started=time.time(), heartbeat=time.time())
        lease_path(tmp).write_text(json.dumps(beat))
        code, said, err = run_main(correct_line(merges['ta-0.5'], {'math': zoo / 'math'}, out, '--diagnose-only'))
    finally:
        writer.kill()
        writer.wait()
    assert code == 1, (code, err)
    assert err.strip().splitlines() == [err.strip()] and 'another darts correct is writing it' in err, err
    assert f'pid {writer.pid}' in err and not out.exists()


def _default_ctrl_c() -> None:
    "In the child: Ctrl-C as in a terminal (pytest-xdist's workers ignore SIGINT, and a child inherits that)."
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextmanager
def correction_running(merged, expert, out):
    "`darts correct` in a process of its own, long enough to be stopped (many steps), once its temporary exists."
    argv = correct_line(merged, {'math': expert}, out, '--iters', '100000')
    cmd = [sys.executable, '-m', 'darts_nb.cli', *argv]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, preexec_fn=_default_ctrl_c)
    try:
        for _ in range(600):  # the temporary exists from the start of the work (the plan and checks come first)
            if [t for t in temporaries_of(out) if not t.endswith('.lease')] or p.poll() is not None:
                break
            time.sleep(0.2)
        assert p.poll() is None, p.stderr.read()
        time.sleep(3)  # into the caches and the training
        yield p
    finally:  # never left running: it would take a CPU from the tests after this one for half an hour
        p.kill()
        p.wait()
        p.stderr.close()


def test_killed_run_is_cleaned_by_the_next(zoo, merges, tmp_path):
    "SIGKILL mid-run: its temporary stays (nothing can remove it then); the next successful run removes it."
    out = tmp_path / 'fixed'
    with correction_running(merges['ta-0.5'], zoo / 'math', out) as p:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert temporaries_of(out) != [] and not out.exists()
    code, said, err = run_main(correct_line(merges['ta-0.5'], {'math': zoo / 'math'}, out, '--diagnose-only'))
    assert code == 0, err[-2000:]
    assert temporaries_of(out) == [] and (out / 'summary.md').exists()


def test_ctrl_c_stops_in_one_line_and_leaves_nothing(zoo, merges, tmp_path):
    "SIGINT (Ctrl-C) mid-run: exit 130, one line, no traceback, the folder as it was (here: absent), no temporary."
    out = tmp_path / 'fixed'
    with correction_running(merges['ta-0.5'], zoo / 'math', out) as p:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=120)
        err = p.stderr.read()
    assert p.returncode == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == 'darts correct: interrupted: stopped, nothing half-written left', err
    assert 'Traceback' not in err, err
    assert temporaries_of(out) == [] and not out.exists()
