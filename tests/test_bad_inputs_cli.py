"""Bad inputs and faults at the command line (issue 16).

Each is a clear error that names what was wrong, or a correct result."""

import io
import os
import sys
import json
import threading
import subprocess
import contextlib
from pathlib import Path
import pytest
import torch
from darts_nb.cli import main, LineLog

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, 'HF_HUB_OFFLINE': '1', 'HF_DATASETS_OFFLINE': '1'}


def run_main(argv):
    "main's exit status, stdout and stderr."
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


NO_CUDA = "device='cuda': this machine has no CUDA GPU"
BAD = {  # argv -> (exit status, what the message must say)
    'device tpu': (['eval', '--model', 'x', '--device', 'tpu'], 2, "expected cpu, cuda, cuda:N or mps, got 'tpu'"),
    'device cuda:x': (['run', '--device', 'cuda:x'], 2, "got 'cuda:x'"),
    'batch size 0': (['eval', '--model', 'x', '--batch-size', '0'], 2, "expected 'auto' or an integer >= 1, got '0'"),
    'unknown experiment': (['run', '--only', 'tables'], 2, "invalid choice: 'tables'"),
    'only without names': (['run', '--only'], 2, 'expected at least one argument'),
    'iters 0': (['surgery', '--iters', '0'], 2, '--iters: expected an integer >= 1, got 0'),
    'unknown profile': (['merge', '--profile', 'nonsense'], 2, "profile='nonsense'"),
    'missing run': (['report', 'no-such-run'], 2, "run 'no-such-run' does not exist"),
    'missing model': (['eval', '--model', '/no/such/model'], 2, '/no/such/model'),
    'fetch of the zoo': (['fetch', '--profile', 'toy'], 2, 'there is nothing to fetch'),
}
if not torch.cuda.is_available():
    BAD['cuda on a CPU machine'] = (['eval', '--model', 'x', '--device', 'cuda'], 2, NO_CUDA)


@pytest.mark.parametrize('case', list(BAD))
def test_bad_argument_is_named(case, tmp_path, monkeypatch):
    monkeypatch.setenv('DARTS_HOME', str(tmp_path))
    argv, status, says = BAD[case]
    code, out, err = run_main(argv)
    assert code == status and says in err, (code, err[-500:])
    assert 'Traceback' not in err
    assert not any(p.name.startswith('zoo') for p in tmp_path.iterdir()), 'a bad argument built a zoo'


def test_help_and_version_need_none_of_the_library():
    r = subprocess.run(
        [sys.executable, '-X', 'importtime', '-m', 'darts_nb.cli', '--help'],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT,
    )
    assert r.returncode == 0 and 'examples:' in r.stdout
    heavy = [m for m in ('torch', 'pandas', 'transformers', 'lm_eval') if f'| {m}\n' in r.stderr]
    assert heavy == [], f'darts --help imports {heavy}'
    r = subprocess.run(
        [sys.executable, '-m', 'darts_nb.cli', '--version'], capture_output=True, text=True, env=ENV, cwd=ROOT
    )
    from darts_nb import __version__

    assert r.returncode == 0 and r.stdout.strip() == f'darts_nb {__version__}'


@pytest.mark.parametrize('cmd', ['zoo', 'merge', 'surgery', 'eval', 'report', 'run', 'fetch', 'lm-eval', 'correct'])
def test_every_subcommand_shows_an_example_and_its_defaults(cmd):
    code, out, _ = run_main([cmd, '--help'])
    assert code == 0 and f'example:\n  darts {cmd}' in out
    if cmd in ('surgery', 'run', 'merge'):
        assert '(default: toy)' in out  # the profile's default is shown


def test_a_log_gets_lines_not_repaints():
    "stderr is a file: a bar's 1000 repaints become a few lines, and the other output is kept as it is."
    from tqdm import tqdm

    buf = io.StringIO()
    log = LineLog(buf, every=3600)
    print('stage: merges', file=log)
    for _ in tqdm(range(1000), file=log, mininterval=0, desc='merge'):
        pass
    for _ in tqdm(range(50), file=log, mininterval=0, desc='score', leave=False):
        pass
    print('done', file=log)
    lines = buf.getvalue().splitlines()
    assert '\r' not in buf.getvalue()
    assert lines[0] == 'stage: merges' and lines[-1] == 'done' and len(lines) == 6, lines
    assert (
        lines[2].startswith('merge: 100%') and lines[4].startswith('score: 100%') or lines[4].startswith('score:  98%')
    ), lines


def test_lm_eval_does_not_print_git_errors_outside_a_repository(tmp_path):
    probe = 'from darts_nb.evaluate import _git_hash_once; print(_git_hash_once())'
    r = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, env=ENV, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == 'None' and 'fatal' not in r.stderr, r.stderr[-300:]


def test_lone_surrogate_in_generated_source_is_a_failure_not_a_crash():
    from darts_nb.sandbox import run_code, check_completion

    r = run_code('x = "\ud800"\n', tests='assert x == 1', timeout=5)
    assert not r.passed and r.status in ('failed', 'error', 'unsupported'), r
    p = dict(prompt='def f():\n    "One."\n', test='def check(c):\n    assert c() == 1\n', entry_point='f')
    r = check_completion(p, '    return "\udcff"\n', timeout=5)
    assert not r.passed and r.status in ('failed', 'error', 'unsupported'), r


def test_concurrent_exports_never_leave_a_partial_file(tmp_path):
    "Eight threads export one split to one path while a reader reads it: every read is whole, no temporary is left."
    from darts_nb.domains import export_jsonl, load_split

    path, want = tmp_path / 'math.jsonl', len(load_split('math', 'eval'))
    export_jsonl('math', 'eval', path)
    bad, stop = [], threading.Event()

    def read():
        while not stop.is_set():
            n = len([json.loads(line) for line in path.read_text().splitlines()])
            if n != want:
                bad.append(n)

    r = threading.Thread(target=read)
    r.start()
    ws = [threading.Thread(target=lambda: [export_jsonl('math', 'eval', path) for _ in range(5)]) for _ in range(8)]
    for w in ws:
        w.start()
    for w in ws:
        w.join()
    stop.set()
    r.join()
    assert bad == [] and sorted(p.name for p in tmp_path.iterdir()) == ['math.jsonl']
