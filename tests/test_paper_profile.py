"""The paper profile without its models: every entry point stops at once, naming the hub ids and `darts fetch`;
hub ids never become paths."""

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAPER_IDS = (
    'meta-llama/Llama-2-7b-hf',
    'codellama/CodeLlama-7b-hf',
    'WizardLMTeam/WizardMath-7B-V1.0',
    'meta-llama/Llama-2-7b-chat-hf',
)


def darts(*args, tmp):
    env = {
        **os.environ,
        'DARTS_HOME': str(tmp / 'home'),
        'HF_HUB_CACHE': str(tmp / 'hub'),
        'HF_HUB_OFFLINE': '1',
        'HF_DATASETS_OFFLINE': '1',
    }
    t0 = time.time()
    r = subprocess.run([sys.executable, '-m', 'darts_nb.cli', *args], capture_output=True, text=True, env=env, cwd=tmp)
    return r, time.time() - t0


def test_run_without_the_models_names_them_and_fetch(tmp_path):
    r, _ = darts('run', '--profile', 'llama2-7b', '--quick', tmp=tmp_path)
    assert r.returncode == 2, r.stderr
    for repo in PAPER_IDS:
        assert repo in r.stderr, (repo, r.stderr)
    assert 'darts fetch --profile llama2-7b' in r.stderr
    assert not (tmp_path / 'meta-llama').exists()
    assert not (tmp_path / 'home' / 'runs').exists()  # nothing joined to the cwd, no run made


def test_merge_without_the_models_does_not_take_an_id_for_a_path(tmp_path):
    r, _ = darts('merge', '--profile', 'llama2-7b', '--quick', tmp=tmp_path)
    assert r.returncode == 2, r.stderr
    assert 'darts fetch' in r.stderr, r.stderr
    assert 'does not exist' not in r.stderr, r.stderr


def test_a_yaml_profile_of_hub_ids_is_resolved_the_same_way(tmp_path):
    (tmp_path / 'p.yaml').write_text(
        'base: org/base-model\nexperts:\n  code: org/code-model\n  math: ./local/math\n  instruct: org/chat\n'
    )
    r, _ = darts('run', '--profile', str(tmp_path / 'p.yaml'), '--quick', tmp=tmp_path)
    assert r.returncode == 2, r.stderr
    assert 'math: model path' in r.stderr, r.stderr
    assert 'does not exist' in r.stderr, r.stderr  # a path stays a path


def test_fetch_offline_says_why(tmp_path):
    r, _ = darts('fetch', '--profile', 'llama2-7b', '--dry-run', tmp=tmp_path)
    assert r.returncode == 2, r.stderr
    assert 'HF_HUB_OFFLINE=1' in r.stderr, r.stderr
    r, _ = darts('fetch', '--profile', 'toy', tmp=tmp_path)
    assert r.returncode == 2, r.stderr
    assert 'nothing to fetch' in r.stderr, r.stderr


def test_bad_batch_size_is_named(tmp_path):
    r, _ = darts('run', '--batch-size', 'big', tmp=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "--batch-size" in r.stderr, r.stderr
    assert "'auto'" in r.stderr, r.stderr
