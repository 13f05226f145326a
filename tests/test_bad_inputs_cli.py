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
    # issue 29: every argument checked before the library's heavy part is imported (LIGHT below) and before any
    # run.json is written
    'rank 0': (['surgery', '--rank', '0'], 2, '--rank: expected an integer >= 1, got 0'),
    'lr 0': (['surgery', '--lr', '0'], 2, '--lr: expected a number in (0, 1], got 0.0'),
    'lr -1': (['surgery', '--lr', '-1'], 2, '--lr: expected a number in (0, 1], got -1.0'),
    'lr 1e30': (['surgery', '--lr', '1e30'], 2, '--lr: expected a number in (0, 1], got 1e+30'),
    'lr nan': (['surgery', '--lr', 'nan'], 2, '--lr: expected a number in (0, 1], got nan'),
    'surgery eval limit 0': (['surgery', '--eval-limit', '0'], 2, '--eval-limit: expected an integer >= 1, got 0'),
    'eval limit 0': (
        ['eval', '--model', '/no/such/model', '--eval-limit', '0'],
        2,
        '--eval-limit: expected an integer >= 1',
    ),
    'zoo limit 0': (
        ['zoo', '--size', 'ci', '--table', '--eval-limit', '0'],
        2,
        '--eval-limit: expected an integer >= 1, got 0',
    ),
    'merge not of the grid form': (
        ['surgery', '--profile', 'ci', '--name', 'typo', '--merge', 'ta-0.55x'],
        2,
        "--merge: expected a sweep configuration name (ta-L, linear-equal, ",
    ),
    'merge not in the grid': (
        ['surgery', '--profile', 'ci', '--name', 'typo', '--merge', 'ta-0.55'],
        2,
        "--merge: expected one of the 129 configurations of the sweep grid (ta-0.5, ",
    ),
    'merge --only typo': (
        ['merge', '--profile', 'ci', '--name', 'typo', '--score', '--only', 'ta-0.5', 'ties-w0.7-d0.35'],
        2,
        "--only: expected one of the 129 configurations of the sweep grid (ties-w0.7-d0.5, ties-w0.7-d0.3, ",
    ),
    'correct lr': (
        ['correct', '--merged', '/m', '--expert', 'math=/e', '--lr', '2'],
        2,
        '--lr: expected a number in (0, 1]',
    ),
    'correct rank 0': (
        ['correct', '--merged', '/m', '--expert', 'math=/e', '--rank', '0'],
        2,
        'rank: expected an integer >= 1, got 0',
    ),
    'correct limit 0': (
        ['correct', '--merged', '/m', '--expert', 'math=/e', '--limit', '0'],
        2,
        'limit: expected an integer >= 1',
    ),
    'unknown judge': (
        ['run', '--profile', 'ci', '--judge', 'gpt-4'],
        2,
        "annotators configs (gpt4, ...) or the path of a configs.yaml, got 'gpt-4'",
    ),
    'fetch of a missing profile': (
        ['fetch', '--profile', 'no/such.yaml'],
        2,
        "--profile: expected 'llama2-7b' or a YAML file",
    ),
    'lm-eval pretrained missing': (
        ['lm-eval', 'run', '--model', 'darts', '--model_args', 'pretrained=/nonexistent', '--tasks', 'darts_math'],
        2,
        "darts lm-eval: error: pretrained: expected a checkpoint folder or a hub id, "
        "got '/nonexistent' (no such folder)",
    ),
}
# refused without importing torch, transformers or mergekit (tested in a fresh process)
LIGHT = [k for k in BAD if k not in ('merge not in the grid', 'merge --only typo', 'unknown profile', 'missing run')]
LIGHT = [k for k in LIGHT if not k.startswith('device')]  # a device is checked by torch itself
if not torch.cuda.is_available():
    BAD['cuda on a CPU machine'] = (['eval', '--model', 'x', '--device', 'cuda'], 2, NO_CUDA)


def made(*args, **kwargs):
    "Stands in for what a refused argument must never reach: a run made, a zoo built."
    raise AssertionError('a bad argument got as far as making a run or building a zoo')


@pytest.mark.parametrize('case', list(BAD))
def test_bad_argument_is_named(case, tmp_path, monkeypatch):
    import darts_nb.experiments
    import darts_nb.profiles
    import darts_nb.runs
    import darts_nb.zoo

    monkeypatch.setenv('DARTS_HOME', str(tmp_path))
    for module in (darts_nb.runs, darts_nb.experiments):
        monkeypatch.setattr(module, 'make_run', made)
    for module in (darts_nb.zoo, darts_nb.profiles):  # profiles.get_profile builds a zoo through its own name
        monkeypatch.setattr(module, 'build_zoo', made)
    argv, status, says = BAD[case]
    code, out, err = run_main(argv)
    assert code == status, (code, err[-500:])
    assert says in err, (code, err[-500:])
    assert 'Traceback' not in err
    assert not any(p.name.startswith('zoo') for p in tmp_path.iterdir()), 'a bad argument built a zoo'
    assert not list(tmp_path.rglob('run.json')), 'a bad argument left a run behind'


PROBE = '''
import contextlib, io, json, os, signal, sys
from darts_nb.cli import main


def late(*args):
    raise TimeoutError('no refusal within 60 s: the command went on to the work')


signal.signal(signal.SIGALRM, late)
out = {}
for name, argv in json.loads(sys.argv[1]).items():  # each case in a child of this process: nothing heavy yet
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        err = io.StringIO()
        signal.alarm(60)  # a refusal is quick: one that is not has gone on to the work
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = main(argv)
            except SystemExit as e:
                code = e.code
            except BaseException as e:
                code = f'{type(e).__name__}: {e}'
        heavy = [m for m in ('torch', 'transformers', 'mergekit') if m in sys.modules]
        os.write(w, json.dumps(dict(code=code, heavy=heavy, err=err.getvalue())).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, 'rb') as f:
        out[name] = json.loads(f.read())
    os.waitpid(pid, 0)
print(json.dumps(out))
'''


@pytest.fixture(scope='module')
def light_refusals(tmp_path_factory):
    "Each LIGHT case run by `main` in a fresh process: its exit status, stderr and the heavy modules it imported."
    home = tmp_path_factory.mktemp('home')
    env = {k: v for k, v in ENV.items() if not k.startswith('OPENAI')} | {'DARTS_HOME': str(home)}
    cases = json.dumps({k: BAD[k][0] for k in LIGHT})
    r = subprocess.run([sys.executable, '-c', PROBE, cases], capture_output=True, text=True, env=env, cwd=home)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.splitlines()[-1])


@pytest.mark.parametrize('case', LIGHT)
def test_bad_argument_is_refused_before_the_heavy_imports(case, light_refusals):
    "Issue 29: a refusal that needs no model needs no torch (checked by the modules imported, not by time)."
    got = light_refusals[case]
    assert got['code'] == BAD[case][1], got
    assert BAD[case][2] in got['err'], got
    assert got['heavy'] == [], f'{case}: refused only after importing {got["heavy"]}'


@pytest.fixture
def judge_home(tmp_path, monkeypatch):
    "DARTS_HOME with the AlpacaEval reference outputs, and no judge endpoint settings in the environment."
    from darts_nb.hub import alpaca_reference_path

    monkeypatch.setenv('DARTS_HOME', str(tmp_path))
    for k in ('OPENAI_API_KEY', 'OPENAI_API_KEYS', 'OPENAI_BASE_URL', 'OPENAI_API_BASE', 'OPENAI_CLIENT_CONFIG_PATH'):
        monkeypatch.delenv(k, raising=False)
    ref = alpaca_reference_path()
    ref.parent.mkdir(parents=True)
    ref.write_text(json.dumps([dict(instruction='Say hi.', output='Hi.', generator='ref', dataset='toy')]))
    return tmp_path


JUDGE_SETTINGS = {  # environment -> what the refusal says
    'no key': ({}, 'its endpoint (openai_completions) needs a key: expected one of OPENAI_API_KEY'),
    'base URL without a scheme': (
        {'OPENAI_API_KEY': 'k', 'OPENAI_BASE_URL': '127.0.0.1:8000/v1'},
        "OPENAI_BASE_URL: expected an http:// or https:// URL, got '127.0.0.1:8000/v1'",
    ),
    'missing client config': (
        {'OPENAI_CLIENT_CONFIG_PATH': '/no/such/openai_configs.yaml'},
        "OPENAI_CLIENT_CONFIG_PATH: expected alpaca_eval's client config file, got '/no/such/openai_configs.yaml'",
    ),
}


@pytest.mark.parametrize('case', list(JUDGE_SETTINGS))
def test_judge_endpoint_settings_are_checked_before_any_model_loads(case, judge_home, monkeypatch):
    "Issue 29: darts run --judge with a known config but settings its endpoint cannot work with: refused at once."
    import darts_nb.runs

    env, says = JUDGE_SETTINGS[case]
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(darts_nb.runs, 'make_run', lambda *a, **k: pytest.fail('the run was made'))
    code, out, err = run_main(['run', '--profile', 'ci', '--name', 'judged', '--judge', 'alpaca_eval_gpt4'])
    assert code == 2, err[-500:]
    assert says in err, err[-500:]
    assert 'Traceback' not in err, err[-500:]
    assert not list(judge_home.rglob('run.json'))
    assert not (judge_home / 'zoo-ci').exists()


def test_a_judge_with_its_settings_passes_the_check(judge_home, monkeypatch):
    "The same command with a key and an http URL gets past the judge's check (to the run, stopped here)."
    import darts_nb.experiments

    monkeypatch.setenv('OPENAI_API_KEY', 'k')
    monkeypatch.setenv('OPENAI_BASE_URL', 'http://127.0.0.1:9/v1')
    monkeypatch.setattr(darts_nb.experiments, 'make_run', lambda *a, **k: (_ for _ in ()).throw(ValueError('made')))
    code, out, err = run_main(['run', '--profile', 'ci', '--name', 'judged', '--judge', 'alpaca_eval_gpt4'])
    assert code == 2, err[-500:]
    assert 'darts run: error: made' in err, err[-500:]


def test_a_diverging_rate_names_the_flag_and_its_value(tmp_path, monkeypatch):
    "Issue 29: --lr within (0, 1] that still diverges: the training's FloatingPointError names --lr and the value."
    import darts_nb.runs
    import darts_nb.run_arms
    import darts_nb.stages
    from darts_nb.cli import _parser, cmd_surgery
    from darts_nb.train import TrainSettings, _diverged

    monkeypatch.setenv('DARTS_HOME', str(tmp_path))

    def run_arm(run, merge, domain, arm):
        if arm.kind != 'none':  # the module's arm trains, and diverges
            settings = TrainSettings(loss='ewl1', iters=arm.iters, lr=arm.lr)
            raise _diverged(3, settings, value=float('inf'), what='loss is not finite')
        return None

    monkeypatch.setattr(darts_nb.runs, 'make_run', lambda *a, **k: object())
    monkeypatch.setattr(darts_nb.stages, 'stage_merges', lambda *a, **k: None)
    monkeypatch.setattr(darts_nb.run_arms, 'run_arm', run_arm)
    ap = _parser()
    a = ap.parse_args(['surgery', '--profile', 'ci', '--merge', 'ta-0.5', '--lr', '0.9', '--iters', '5'])
    with pytest.raises(FloatingPointError) as e:
        cmd_surgery(a, ap)
    assert str(e.value).startswith('--lr 0.9: train_surgery: loss is not finite at step 3 of 5'), e.value


def test_help_and_version_need_none_of_the_library():
    r = subprocess.run(
        [sys.executable, '-X', 'importtime', '-m', 'darts_nb.cli', '--help'],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT,
    )
    assert r.returncode == 0
    assert 'examples:' in r.stdout
    heavy = [m for m in ('torch', 'pandas', 'transformers', 'lm_eval') if f'| {m}\n' in r.stderr]
    assert heavy == [], f'darts --help imports {heavy}'
    r = subprocess.run(
        [sys.executable, '-m', 'darts_nb.cli', '--version'], capture_output=True, text=True, env=ENV, cwd=ROOT
    )
    from darts_nb import __version__

    assert r.returncode == 0
    assert r.stdout.strip() == f'darts_nb {__version__}'


@pytest.mark.parametrize('cmd', ['zoo', 'merge', 'surgery', 'eval', 'report', 'run', 'fetch', 'lm-eval', 'correct'])
def test_every_subcommand_shows_an_example_and_its_defaults(cmd):
    code, out, _ = run_main([cmd, '--help'])
    assert code == 0
    assert f'example:\n  darts {cmd}' in out
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
    assert lines[0] == 'stage: merges', lines
    assert lines[-1] == 'done', lines
    assert len(lines) == 6, lines
    assert (
        lines[2].startswith('merge: 100%') and lines[4].startswith('score: 100%') or lines[4].startswith('score:  98%')
    ), lines


def test_lm_eval_does_not_print_git_errors_outside_a_repository(tmp_path):
    probe = 'from darts_nb.evaluate import _git_hash_once; print(_git_hash_once())'
    r = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, env=ENV, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-300:]
    assert r.stdout.strip() == 'None', r.stderr[-300:]
    assert 'fatal' not in r.stderr, r.stderr[-300:]


def test_lone_surrogate_in_generated_source_is_a_failure_not_a_crash():
    from darts_nb.sandbox import run_code, check_completion

    r = run_code('x = "\ud800"\n', tests='assert x == 1', timeout=5)
    assert not r.passed, r
    assert r.status in ('failed', 'error', 'unsupported'), r
    p = dict(prompt='def f():\n    "One."\n', test='def check(c):\n    assert c() == 1\n', entry_point='f')
    r = check_completion(p, '    return "\udcff"\n', timeout=5)
    assert not r.passed, r
    assert r.status in ('failed', 'error', 'unsupported'), r


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
    assert bad == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ['math.jsonl']
