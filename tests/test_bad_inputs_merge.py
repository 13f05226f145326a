"""Issue 16 for the zoo, profiles and merges: every bad input or fault is a clear error naming the merge / file / key /
value, or a correct result, and nothing half-written is left (a half-written or non-finite merge never counts as done).

Tables: merge configurations (TABLE_CONFIG), merge outputs that are not usable (TABLE_OUTPUT), corrupt checkpoints
(TABLE_CORRUPT), the zoo's completeness (TABLE_ZOO), YAML profiles (TABLE_PROFILE), a YAML profile's merges folder, and
a full disk (TABLE_DISK)."""

import errno
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
import pytest
from safetensors.torch import load_file, save_file
from darts_nb import merge, zoo
from darts_nb.hub import CorruptFile
from darts_nb.merge import (
    run_merges,
    ta_config,
    ties_config,
    linear_config,
    dare_config,
    is_finished,
    unfinished_reason,
    sweep_configs,
    check_merge_output,
)
from darts_nb.zoo import build_zoo, check_compatible, get_profile, zoo_dir
from conftest import half_written

ROOT = Path(__file__).resolve().parent.parent
DOMAINS = ('code', 'math', 'instruct')


@pytest.fixture(scope='module')
def ci(tmp_path_factory):
    "A private copy of the ci zoo (base and three experts, with their tokenizers): tests may damage copies of it."
    src, root = build_zoo('ci'), tmp_path_factory.mktemp('ci')
    return {r: Path(shutil.copytree(p, root / r)) for r, p in src.items()}


def experts(m, **swap):
    return {d: swap.get(d, m[d]) for d in DOMAINS}


def copy_model(m, role, tmp_path) -> Path:
    return Path(shutil.copytree(m[role], tmp_path / f'{role}-copy'))


# ---------------- 1. merge configurations: refused before any work
def _ties(m):
    return ties_config(m['base'], experts(m), 0.5, 0.5)


def _with_model_param(m, **kv):
    c = _ties(m)
    c['models'][0]['parameters'].update(kv)
    return c


# (case, config from the models, message fragments: the merge, the key, the value and what was expected)
TABLE_CONFIG = [
    (
        'weight nan',
        lambda m: _with_model_param(m, weight=float('nan')),
        ["config 'bad'", 'models[0].parameters.weight = nan', 'expected a finite number'],
    ),
    (
        'weight inf',
        lambda m: _with_model_param(m, weight=float('inf')),
        ['models[0].parameters.weight = inf', 'finite'],
    ),
    ('weight -inf', lambda m: _with_model_param(m, weight=-math.inf), ['weight = -inf']),
    ('weight as text', lambda m: _with_model_param(m, weight='0.5'), ["weight = '0.5'", 'expected a finite number']),
    ('weight a bool', lambda m: _with_model_param(m, weight=True), ['weight = True', 'finite number']),
    ('weight gradient with nan', lambda m: _with_model_param(m, weight=[0.5, float('nan')]), ['weight = nan']),
    (
        'weight conditional with inf',
        lambda m: _with_model_param(m, weight=[{'filter': 'mlp', 'value': math.inf}, {'value': 0.5}]),
        ['weight = inf'],
    ),
    (
        'density 5',
        lambda m: _with_model_param(m, density=5),
        ['models[0].parameters.density = 5', 'expected a number in (0, 1]'],
    ),
    ('density -1', lambda m: _with_model_param(m, density=-1), ['density = -1', '(0, 1]']),
    ('density 0', lambda m: _with_model_param(m, density=0), ['density = 0', '(0, 1]']),
    ('density nan', lambda m: _with_model_param(m, density=float('nan')), ['density = nan']),
    ('density as word', lambda m: dare_config(m['base'], experts(m), 'dare_ties', 0.5, 'high'), ["density = 'high'"]),
    (
        'lambda inf',
        lambda m: {**ta_config(m['base'], experts(m), 0.5), 'parameters': {'lambda': math.inf}},
        ['parameters.lambda = inf', 'finite'],
    ),
    (
        'lambda nan',
        lambda m: {**ta_config(m['base'], experts(m), 0.5), 'parameters': {'lambda': float('nan')}},
        ['parameters.lambda = nan'],
    ),
    (
        'passthrough scale nan',
        lambda m: {
            'merge_method': 'passthrough',
            'models': [{'model': str(m['base']), 'parameters': {'scale': float('nan')}}],
        },
        ['scale = nan'],
    ),
    (
        'unknown parameter',
        lambda m: _with_model_param(m, densty=0.5),
        ["models[0].parameters.densty is not a parameter of merge_method 'ties'"],
    ),
    (
        'flag not a bool',
        lambda m: {**_ties(m), 'parameters': {'normalize': 'no'}},
        ["parameters.normalize = 'no'", 'expected true or false'],
    ),
    (
        'parameters not a mapping',
        lambda m: {**_ties(m), 'models': [{'model': str(m['code']), 'parameters': 0.5}]},
        ['models[0].parameters is 0.5', 'expected a mapping'],
    ),
    (
        'models as bare strings',
        lambda m: {**_ties(m), 'models': [str(m['code']), str(m['math'])]},
        ['models[0] is', 'expected a mapping like', 'bare path'],
    ),
    (
        'models a mapping',
        lambda m: {**_ties(m), 'models': {'code': str(m['code'])}},
        ['models is dict', 'expected a list of entries'],
    ),
    (
        'model entry without model',
        lambda m: {**_ties(m), 'models': [{'parameters': {'weight': 0.5}}]},
        ["models[0] is {'parameters'", 'expected a mapping like'],
    ),
    ('models empty', lambda m: {**_ties(m), 'models': []}, ["'models' is missing or empty"]),
    ('method unknown', lambda m: {**_ties(m), 'merge_method': 'tie'}, ["merge_method='tie' is not a mergekit method"]),
    (
        'base_model not a path',
        lambda m: {**_ties(m), 'base_model': ['a', 'b']},
        ["base_model is ['a', 'b']", 'expected a path'],
    ),
    ('relative path', lambda m: {**_ties(m), 'base_model': 'meta-llama/Llama-2-7b-hf'}, ['relative', 'hub id']),
]


@pytest.mark.parametrize('case,make,msgs', TABLE_CONFIG, ids=[t[0] for t in TABLE_CONFIG])
def test_bad_config_refused_before_any_work(ci, tmp_path, case, make, msgs):
    out = tmp_path / 'out'
    with pytest.raises(ValueError) as e:
        run_merges(
            {'bad': make(ci), 'ta-0.5': ta_config(ci['base'], experts(ci), 0.5)}, out, device='cpu', progress=False
        )
    for s in msgs:
        assert s in str(e.value), (s, str(e.value))
    assert not out.exists()  # nothing merged, not even the good configuration, and no folder made


TABLE_CONFIG_OK = [  # valid edge cases: a merge that is done, whole and finite
    ('density 1 (nothing trimmed)', lambda m: ties_config(m['base'], experts(m), 0.5, 1.0)),
    ('negative weight (task negation)', lambda m: ta_config(m['base'], experts(m), -0.3)),
    (
        'weight gradient',
        lambda m: {
            **ta_config(m['base'], experts(m), 0.5),
            'models': [{'model': str(m['code']), 'parameters': {'weight': [0.2, 0.8]}}],
        },
    ),
]


@pytest.mark.parametrize('case,make', TABLE_CONFIG_OK, ids=[t[0] for t in TABLE_CONFIG_OK])
def test_valid_edge_config_is_merged(ci, tmp_path, case, make):
    res = run_merges({'ok': make(ci)}, tmp_path, device='cpu', progress=False)
    assert list(res.status) == ['done'], res.error[0]
    assert is_finished(tmp_path / 'ok')
    assert check_merge_output(tmp_path / 'ok', ci['base'])
    assert not half_written(tmp_path)


# ---------------- 1. merge outputs that are not usable never count as done
def _expert_with_inf(m, tmp_path):
    p = copy_model(m, 'math', tmp_path)
    w = load_file(p / 'model.safetensors')
    k = 'model.layers.0.mlp.up_proj.weight'
    w[k][0, 0] = math.inf
    save_file(w, p / 'model.safetensors', metadata={'format': 'pt'})
    return p


def _after_merge(change):
    "A stand-in for mergekit that merges for real, then damages its output with `change(out_dir)`."
    real = merge._merge_one

    def run(mc, out, device, seed):
        real(mc, out, device, seed)
        change(out)

    return run


def _drop_tensor(out):
    w = load_file(out / 'model.safetensors')
    del w['lm_head.weight']
    save_file(w, out / 'model.safetensors', metadata={'format': 'pt'})


def _truncate(out):
    b = (out / 'model.safetensors').read_bytes()
    (out / 'model.safetensors').write_bytes(b[: len(b) - 100])


def _nan_weights(out):
    w = load_file(out / 'model.safetensors')
    w['model.norm.weight'][:] = float('nan')
    save_file(w, out / 'model.safetensors', metadata={'format': 'pt'})


TABLE_OUTPUT = [  # (case, config from the models and tmp_path, stand-in for mergekit or None, error fragments)
    (
        'weights cancel under normalisation',
        lambda m, t: linear_config(m['base'], experts(m), {'code': 1.0, 'math': -1.0, 'instruct': 0.0}),
        None,
        ['NaN/inf value(s)', 'model.safetensors: tensor'],
    ),
    (
        'an expert holds inf',
        lambda m, t: ta_config(m['base'], experts(m, math=_expert_with_inf(m, t)), 0.5),
        None,
        ['tensor model.layers.0.mlp.up_proj.weight holds 1 NaN/inf value(s)'],
    ),
    (
        'mergekit writes NaN',
        lambda m, t: ta_config(m['base'], experts(m), 0.5),
        _after_merge(_nan_weights),
        ['tensor model.norm.weight holds 64 NaN/inf'],
    ),
    (
        'mergekit drops a tensor',
        lambda m, t: ta_config(m['base'], experts(m), 0.5),
        _after_merge(_drop_tensor),
        ["lacks 1 tensor(s)", "lm_head.weight", 'incomplete'],
    ),
    (
        'mergekit writes a truncated file',
        lambda m, t: ta_config(m['base'], experts(m), 0.5),
        _after_merge(_truncate),
        ['model.safetensors is truncated'],
    ),
    (
        'mergekit writes nothing',
        lambda m, t: ta_config(m['base'], experts(m), 0.5),
        lambda mc, out, device, seed: None,
        ['config.json'],
    ),
]


@pytest.mark.parametrize('case,make,stand_in,msgs', TABLE_OUTPUT, ids=[t[0] for t in TABLE_OUTPUT])
def test_unusable_merge_fails_and_is_removed(ci, tmp_path, monkeypatch, case, make, stand_in, msgs):
    out = tmp_path / 'out'
    cfgs = {'bad': make(ci, tmp_path)}
    if stand_in:
        monkeypatch.setattr(merge, '_merge_one', stand_in)
    res = run_merges(cfgs, out, device='cpu', progress=False)
    assert list(res.status) == ['failed']
    for s in msgs:
        assert s in res.error[0], (s, res.error[0])
    assert not (out / 'bad').exists()
    assert not is_finished(out / 'bad')
    assert not half_written(out)
    assert json.loads((out / '_failures.json').read_text())['bad']['error'] == res.error[0]


def test_damaged_finished_merge_is_not_skipped(ci, tmp_path):
    """A finished merge damaged afterwards (truncated on disk) no longer counts as finished: the re-run names the file;
    the folder is kept for the user to delete."""
    cfg = {'ta-0.5': ta_config(ci['base'], experts(ci), 0.5)}
    assert list(run_merges(cfg, tmp_path, device='cpu', progress=False).status) == ['done']
    whole = (tmp_path / 'ta-0.5' / 'model.safetensors').read_bytes()
    _truncate(tmp_path / 'ta-0.5')
    assert not is_finished(tmp_path / 'ta-0.5')
    assert 'is truncated' in unfinished_reason(tmp_path / 'ta-0.5')
    res = run_merges(cfg, tmp_path, device='cpu', progress=False)
    assert list(res.status) == ['failed']
    assert str(tmp_path / 'ta-0.5' / 'model.safetensors') in res.error[0]
    assert 'delete it to redo' in res.error[0]
    (tmp_path / 'ta-0.5' / 'model.safetensors').write_bytes(whole)
    assert is_finished(tmp_path / 'ta-0.5')
    (tmp_path / 'ta-0.5' / 'merge.yaml').write_bytes(b'\xff\xfe{[')
    assert not is_finished(tmp_path / 'ta-0.5')
    assert 'merge.yaml is damaged' in unfinished_reason(tmp_path / 'ta-0.5')


def test_damaged_failure_record_is_named(ci, tmp_path):
    (tmp_path / '_failures.json').write_text('{"ta-0.5": {"error": ')
    with pytest.raises(CorruptFile, match=r'_failures.json is not valid JSON .*only records failed merges'):
        run_merges({'ta-0.5': ta_config(ci['base'], experts(ci), 0.5)}, tmp_path, device='cpu', progress=False)
    assert not (tmp_path / 'ta-0.5').exists()


# ---------------- 3. corrupt or truncated checkpoints: a clear error naming the file
def _trunc(f, keep=0.5):
    b = f.read_bytes()
    f.write_bytes(b[: int(len(b) * keep)])


def _huge_header(f):
    b = f.read_bytes()
    f.write_bytes((10**12).to_bytes(8, 'little') + b[8:])


def _garbled_header(f):
    b = bytearray(f.read_bytes())
    b[8:40] = b'\xff' * 32
    f.write_bytes(bytes(b))


def _sharded_missing(p):
    (p / 'model.safetensors.index.json').write_text(
        json.dumps({'metadata': {}, 'weight_map': {'lm_head.weight': 'model-00002-of-00002.safetensors'}})
    )


TABLE_CORRUPT = [  # (case, damage done to a copy of the math expert, the file named, what is wrong)
    (
        'weights truncated',
        lambda p: _trunc(p / 'model.safetensors'),
        'model.safetensors',
        'is truncated: its header describes',
    ),
    ('weights 0 bytes', lambda p: (p / 'model.safetensors').write_bytes(b''), 'model.safetensors', 'fewer than the 8'),
    (
        'weights header length garbage',
        lambda p: _huge_header(p / 'model.safetensors'),
        'model.safetensors',
        'truncated or not a safetensors file',
    ),
    (
        'weights header not JSON',
        lambda p: _garbled_header(p / 'model.safetensors'),
        'model.safetensors',
        'unreadable safetensors header',
    ),
    (
        'weights padded',
        lambda p: (p / 'model.safetensors').write_bytes((p / 'model.safetensors').read_bytes() + b'\0' * 7),
        'model.safetensors',
        'is damaged',
    ),
    ('config truncated', lambda p: _trunc(p / 'config.json'), 'config.json', 'is not valid JSON'),
    (
        'config not UTF-8',
        lambda p: (p / 'config.json').write_bytes(b'\x89PNG\r\n\x1a\n\xff\xfe'),
        'config.json',
        'is not UTF-8 text',
    ),
    ('config a list', lambda p: (p / 'config.json').write_text('[1, 2]'), 'config.json', 'is not a JSON object'),
    (
        'tokenizer garbage',
        lambda p: (p / 'tokenizer.json').write_text('<html>502 Bad Gateway</html>'),
        'tokenizer.json',
        'is not valid JSON',
    ),
    (
        'tokenizer not UTF-8',
        lambda p: (p / 'tokenizer.json').write_bytes(b'\xff' * 64),
        'tokenizer.json',
        'is not UTF-8 text',
    ),
    (
        'tokenizer JSON but not a tokenizer',
        lambda p: (p / 'tokenizer.json').write_text('{"model": 3}'),
        '',
        'could not read the tokenizer of',
    ),
    (
        'tokenizer config truncated',
        lambda p: _trunc(p / 'tokenizer_config.json'),
        'tokenizer_config.json',
        'is not valid JSON',
    ),
    ('shard index names a missing shard', _sharded_missing, 'model.safetensors.index.json', 'which is missing'),
]


def _damaged(ci, tmp_path, damage) -> Path:
    p = copy_model(ci, 'math', tmp_path)
    damage(p)
    return p


@pytest.mark.parametrize('case,damage,fname,what', TABLE_CORRUPT, ids=[t[0] for t in TABLE_CORRUPT])
def test_corrupt_checkpoint_in_check_compatible(ci, tmp_path, case, damage, fname, what):
    p = _damaged(ci, tmp_path, damage)
    with pytest.raises(ValueError) as e:
        check_compatible({'base': ci['base'], 'math': p})
    assert str(p / fname) in str(e.value), str(e.value)
    assert what in str(e.value), str(e.value)
    assert type(e.value).__name__ in (
        'CorruptFile',
        'ValueError',
    )  # never a raw SafetensorError / JSONDecodeError / UnicodeDecodeError


@pytest.mark.parametrize('case,damage,fname,what', TABLE_CORRUPT, ids=[t[0] for t in TABLE_CORRUPT])
def test_corrupt_checkpoint_in_run_merges(ci, tmp_path, case, damage, fname, what):
    p, out = _damaged(ci, tmp_path, damage), tmp_path / 'out'
    with pytest.raises(ValueError) as e:
        run_merges({'ta-0.5': ta_config(ci['base'], experts(ci, math=p), 0.5)}, out, device='cpu', progress=False)
    assert str(p / fname) in str(e.value), str(e.value)
    assert what in str(e.value), str(e.value)
    assert not out.exists()


def test_corrupt_reference_config_in_sweep_configs(ci, tmp_path):
    "The grid reads config.json (vocabulary sizes): a damaged one is named there too."
    p = _damaged(ci, tmp_path, lambda p: _trunc(p / 'config.json'))
    with pytest.raises(CorruptFile, match='config.json is not valid JSON'):
        sweep_configs(p, experts(ci))


def test_corrupt_weights_in_load_model(ci, tmp_path):
    p = _damaged(ci, tmp_path, lambda p: _trunc(p / 'model.safetensors'))
    with pytest.raises(CorruptFile, match='model.safetensors is truncated'):
        zoo.load_model(p, device='cpu')


# ---------------- 2. the zoo's completeness check verifies its files
@pytest.fixture
def zoo_home(tmp_path, monkeypatch):
    "A DARTS_HOME holding a copy of the built ci zoo."
    src = zoo_dir('ci')
    build_zoo('ci')
    monkeypatch.setenv('DARTS_HOME', str(tmp_path))
    shutil.copytree(src, zoo_dir('ci'))
    return zoo_dir('ci')


TABLE_ZOO = [  # (case, damage to the zoo copy, the file named, what is wrong)
    (
        'expert weights truncated',
        lambda z: _trunc(z / 'math' / 'model.safetensors'),
        'math/model.safetensors',
        'is truncated',
    ),
    (
        'base weights 0 bytes',
        lambda z: (z / 'base' / 'model.safetensors').write_bytes(b''),
        'base/model.safetensors',
        'fewer than the 8',
    ),
    (
        'tokenizer garbage',
        lambda z: (z / 'code' / 'tokenizer.json').write_text('not json at all'),
        'code/tokenizer.json',
        'is not valid JSON',
    ),
    ('tokenizer missing', lambda z: (z / 'instruct' / 'tokenizer.json').unlink(), 'instruct', 'missing tokenizer.json'),
    (
        'config garbled',
        lambda z: (z / 'base' / 'config.json').write_bytes(b'\x00\xff' * 10),
        'base/config.json',
        'is not UTF-8 text',
    ),
    ('zoo.json truncated', lambda z: _trunc(z / 'math' / 'zoo.json'), 'math/zoo.json', 'is not valid JSON'),
]


@pytest.mark.parametrize('case,damage,fname,what', TABLE_ZOO, ids=[t[0] for t in TABLE_ZOO])
def test_damaged_zoo_is_reported(zoo_home, case, damage, fname, what):
    damage(zoo_home)
    before = sorted((str(p), p.stat().st_size) for p in zoo_home.rglob('*'))
    with pytest.raises(ValueError) as e:
        build_zoo('ci')
    assert str(zoo_home / fname) in str(e.value), str(e.value)
    assert what in str(e.value), str(e.value)
    assert 'delete it and build again' in str(e.value), str(e.value)
    with pytest.raises(ValueError, match='delete it and build again'):
        get_profile('ci')
    assert (
        sorted((str(p), p.stat().st_size) for p in zoo_home.rglob('*')) == before
    )  # reported, nothing changed or half-built


def test_whole_zoo_copy_is_reused(zoo_home):
    mt = {p: p.stat().st_mtime_ns for p in zoo_home.rglob('*')}
    paths = build_zoo('ci')
    assert paths['base'] == zoo_home / 'base'
    assert {p: p.stat().st_mtime_ns for p in zoo_home.rglob('*')} == mt


# ---------------- 4. YAML profiles: a clear error naming the file, with an example
TABLE_PROFILE = [  # (case, file content, what the message says)
    ('syntax error', 'base: /m/base\nexperts:\n  code: [unclosed\n', 'not valid YAML at line'),
    ('tab indentation', 'base: /m/base\nexperts:\n\tcode: /m/code\n', 'not valid YAML'),
    ('empty file', '', 'got nothing (empty)'),
    ('only comments', '# nothing here\n', 'got nothing (empty)'),
    ('a scalar', 'llama2-7b\n', "got str 'llama2-7b'"),
    ('a list', '- /m/base\n- /m/code\n', 'got list'),
    ('experts a list', 'base: /m/base\nexperts:\n  - /m/code\n  - /m/math\n', 'experts is list'),
    ('experts a scalar', 'base: /m/base\nexperts: /m/code\n', "experts is str '/m/code'"),
    ('experts empty value', 'base: /m/base\nexperts:\n', 'experts is nothing (empty)'),
    ('no base', 'experts:\n  code: /m/code\n', "lacks ['base']"),
    ('no experts', 'base: /m/base\n', "lacks ['experts']"),
    ('misspelt key', 'base: /m/base\nexpert:\n  code: /m/code\n', "unknown key(s) ['expert']"),
    ('unknown domain', 'base: /m/base\nexperts:\n  coding: /m/code\n', "experts has domain 'coding'"),
    ('expert path null', 'base: /m/base\nexperts:\n  code:\n', 'experts.code is nothing (empty)'),
    ('base a mapping', 'base: {path: /m/base}\nexperts:\n  code: /m/code\n', 'base is dict'),
    ('eval unknown', 'base: /m/base\nexperts:\n  code: /m/code\neval: gsm8k\n', "eval is str 'gsm8k'"),
    ('name unsafe', 'name: ../../etc\nbase: /m/base\nexperts:\n  code: /m/code\n', "name is str '../../etc'"),
    ('not UTF-8', b'base: /m/\xff\xfe\n', 'not UTF-8 text'),
]


@pytest.mark.parametrize('case,text,what', TABLE_PROFILE, ids=[t[0] for t in TABLE_PROFILE])
def test_bad_yaml_profile(tmp_path, case, text, what):
    y = tmp_path / 'profile.yaml'
    (y.write_bytes if isinstance(text, bytes) else y.write_text)(text)
    with pytest.raises(ValueError) as e:
        get_profile(str(y))
    m = str(e.value)
    assert f'profile file {y}: ' in m, m
    assert what in m, m
    assert 'a profile looks like' in m, m
    assert 'experts:' in m, m
    assert sorted(p.name for p in tmp_path.iterdir()) == ['profile.yaml']


def test_profile_that_is_a_directory(tmp_path):
    (tmp_path / 'dir.yaml').mkdir()
    with pytest.raises(ValueError, match=f'profile file {tmp_path / "dir.yaml"}: not a file'):
        get_profile(str(tmp_path / 'dir.yaml'))


def test_bad_dict_profile():
    with pytest.raises(ValueError, match="profile dict: experts is list"):
        get_profile({'base': '/m/base', 'experts': ['/m/code']})


TABLE_PROFILE_OK = [  # (case, file name, content, the profile's name)
    (
        'yaml',
        'profile.yaml',
        'base: {base}\nexperts:\n  code: {code}\n  math: {math}\n  instruct: {instruct}\n',
        'profile',
    ),
    ('json', 'mine.json', '{{"base": "{base}", "experts": {{"math": "{math}"}}}}', 'mine'),
    ('name key', 'p.yml', 'name: llama-mix\nbase: {base}\nexperts:\n  math: {math}\neval: toy\n', 'llama-mix'),
    ('odd file name', 'my profile (v2).yaml', 'base: {base}\nexperts:\n  math: {math}\n', 'my-profile-v2'),
]


@pytest.mark.parametrize('case,fname,text,name', TABLE_PROFILE_OK, ids=[t[0] for t in TABLE_PROFILE_OK])
def test_good_profile_file(ci, tmp_path, case, fname, text, name):
    y = tmp_path / fname
    y.write_text(text.format(**{k: v for k, v in ci.items()}))
    prof = get_profile(str(y))
    assert prof.name == name
    assert prof.base == str(ci['base'])
    assert prof.experts['math'] == str(ci['math'])


# ---------------- 5. `darts merge --profile /abs/path/profile.yaml`: merges under DARTS_HOME/merges
def test_yaml_profile_merges_go_under_darts_home(ci, tmp_path):
    y = tmp_path / 'conf' / 'profile.yaml'
    y.parent.mkdir()
    y.write_text(
        ''.join(f'{k}: {v}\n' for k, v in [('base', ci['base'])])
        + 'experts:\n'
        + ''.join(f'  {d}: {ci[d]}\n' for d in DOMAINS)
    )
    text = y.read_text()
    env = {
        **os.environ,
        'DARTS_HOME': str(tmp_path / 'home'),
        'HF_HUB_OFFLINE': '1',
        'HF_DATASETS_OFFLINE': '1',
        'TOKENIZERS_PARALLELISM': 'false',
    }
    r = subprocess.run(
        [sys.executable, '-m', 'darts_nb.cli', 'merge', '--profile', str(y), '--only', 'ta-0.5'],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    made = list((tmp_path / 'home' / 'merges').glob('profile-*/ta-0.5'))
    assert len(made) == 1, list((tmp_path / 'home').rglob('*'))
    assert is_finished(made[0]), list((tmp_path / 'home').rglob('*'))
    assert y.read_text() == text
    assert sorted(p.name for p in y.parent.iterdir()) == ['profile.yaml']  # the YAML untouched, nothing beside it
    assert not half_written(tmp_path / 'home' / 'merges')


# ---------------- 6. a full disk: a clear error, nothing half-written, the sweep stops
def _enospc_safetensors(write_part):
    "A stand-in for safetensors.torch.save_file that writes part of the file, then fails as it does on a full disk."
    from safetensors import SafetensorError

    def save(tensors, filename, metadata=None):
        if write_part:
            Path(filename).write_bytes(b'\0' * 1000)
        raise SafetensorError('Error while serializing: I/O error: No space left on device (os error 28)')

    return save


def _enospc_oserror(*a, **k):
    raise OSError(errno.ENOSPC, 'No space left on device')


def _merge_disk_full_in_weights(monkeypatch):
    import safetensors.torch

    monkeypatch.setattr(safetensors.torch, 'save_file', _enospc_safetensors(True))


def _merge_disk_full_in_tokenizer(monkeypatch):
    monkeypatch.setattr(merge.shutil, 'copy2', _enospc_oserror)


def _merge_disk_full_in_yaml(monkeypatch):
    real = Path.write_text

    def write_text(self, *a, **k):
        if self.name == 'merge.yaml':
            real(self, 'partial')
            _enospc_oserror()
        return real(self, *a, **k)

    monkeypatch.setattr(Path, 'write_text', write_text)


TABLE_DISK = [  # (case, where the disk fills up)
    ('merge weights (safetensors error)', _merge_disk_full_in_weights),
    ('merge tokenizer copy (OSError)', _merge_disk_full_in_tokenizer),
    ('merge.yaml (OSError, after the weights)', _merge_disk_full_in_yaml),
]


@pytest.mark.parametrize('case,fill', TABLE_DISK, ids=[t[0] for t in TABLE_DISK])
def test_disk_full_during_merges(ci, tmp_path, monkeypatch, case, fill):
    out = tmp_path / 'out'
    cfgs = {'ta-0.5': ta_config(ci['base'], experts(ci), 0.5), 'ta-0.7': ta_config(ci['base'], experts(ci), 0.7)}
    fill(monkeypatch)
    with pytest.raises(OSError) as e:
        run_merges(cfgs, out, device='cpu', progress=False)
    assert e.value.errno == errno.ENOSPC, str(e.value)
    assert f'while writing {out / "ta-0.5"}' in str(e.value), str(e.value)
    assert 'free some space' in str(e.value), str(e.value)
    assert not (out / 'ta-0.5').exists()
    assert not (out / 'ta-0.7').exists()  # the sweep stops: the next merge is not tried
    assert not half_written(out)
    assert not is_finished(out / 'ta-0.5')
    monkeypatch.undo()  # space again: the sweep resumes from nothing and finishes
    assert list(run_merges(cfgs, out, device='cpu', progress=False).status) == ['done', 'done']


@pytest.fixture(scope='module')
def tok():
    return zoo.train_tokenizer(['def f(x):\n    return x + 1\n', 'Question: 1 + 2?\nAnswer: 3'] * 20, vocab_size=300)


def _zoo_disk_full_in_weights(monkeypatch):
    import transformers.modeling_utils as mu

    monkeypatch.setattr(mu, 'safe_save_file', _enospc_safetensors(True))


def _zoo_disk_full_in_tokenizer(monkeypatch):
    from transformers import PreTrainedTokenizerFast

    monkeypatch.setattr(PreTrainedTokenizerFast, 'save_pretrained', _enospc_oserror)


def _zoo_disk_full_in_meta(monkeypatch):
    def write_json(path, obj):
        Path(path).write_text('{')
        _enospc_oserror()

    monkeypatch.setattr(zoo, 'write_json', write_json)


TABLE_ZOO_DISK = [
    ('model weights (safetensors error)', _zoo_disk_full_in_weights),
    ('tokenizer (OSError)', _zoo_disk_full_in_tokenizer),
    ('zoo.json (OSError, written last)', _zoo_disk_full_in_meta),
]


@pytest.mark.parametrize('case,fill', TABLE_ZOO_DISK, ids=[t[0] for t in TABLE_ZOO_DISK])
def test_disk_full_while_saving_a_zoo_model(tmp_path, monkeypatch, tok, case, fill):
    from darts_nb.core import tiny_llama

    path = tmp_path / 'zoo' / 'base'
    model = tiny_llama(vocab_size=len(tok))
    fill(monkeypatch)
    with pytest.raises(OSError) as e:
        zoo._save(model, tok, path, {'key': 'k', 'role': 'base'})
    assert e.value.errno == errno.ENOSPC, str(e.value)
    assert f'while writing {path}' in str(e.value), str(e.value)
    assert not path.exists()
    assert not half_written(tmp_path)
    monkeypatch.undo()
    zoo._save(model, tok, path, {'key': 'k', 'role': 'base'})
    assert zoo._is_complete(path, 'k')
    assert not half_written(tmp_path)
