"Bad input and determinism for the zoo and profiles (the lessons in 02_zoo cover the happy path)."

import json
import pytest
import torch
from darts_nb.core import tiny_llama
from darts_nb.zoo import (
    build_zoo,
    load_model,
    check_compatible,
    get_profile,
    train_tokenizer,
    train_lm,
    pack,
    zoo_dir,
    _is_complete,
)


def _save_tiny(path, tok, **kw):
    m = tiny_llama(vocab_size=len(tok), **kw)
    m.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope='module')
def tok():
    return train_tokenizer(['def f(x):\n    return x + 1\n', 'Question: 1 + 2?\nAnswer: 3'] * 20, vocab_size=300)


def test_missing_model_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match='does not exist'):
        load_model(tmp_path / 'nope')


def test_dir_without_config(tmp_path):
    (tmp_path / 'm').mkdir()
    with pytest.raises(FileNotFoundError, match='no config.json'):
        load_model(tmp_path / 'm')


def test_corrupt_weights(tmp_path, tok):
    p = _save_tiny(tmp_path / 'm', tok)
    (p / 'model.safetensors').write_bytes(b'not a safetensors file')
    with pytest.raises(ValueError, match=str(p)):
        load_model(p)


def test_incomplete_zoo_dir_is_refused(home):
    d = zoo_dir('ci') / 'base'
    d.mkdir(parents=True)
    (d / 'config.json').write_text('{}')
    with pytest.raises(ValueError, match='not a complete zoo model'):
        build_zoo('ci')


def test_foreign_recipe_is_refused(home, tok):
    d = zoo_dir('ci') / 'base'
    _save_tiny(d, tok)
    (d / 'zoo.json').write_text(json.dumps({'key': 'other'}))
    with pytest.raises(ValueError, match='another recipe'):
        _is_complete(d, 'mine')


def test_unknown_size():
    with pytest.raises(ValueError, match="size: expected one of .*, got 'huge'"):
        build_zoo('huge')


def test_profile_path_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match='no-such'):
        get_profile({'base': str(tmp_path / 'no-such'), 'experts': {}})
    with pytest.raises(FileNotFoundError, match='nope.yaml'):
        get_profile(str(tmp_path / 'nope.yaml'))


def test_profile_yaml(tmp_path, tok):
    b, e = _save_tiny(tmp_path / 'b', tok), _save_tiny(tmp_path / 'e', tok, seed=1)
    (tmp_path / 'p.yaml').write_text(f'base: {b}\nexperts:\n  math: {e}\n')
    prof = get_profile(str(tmp_path / 'p.yaml'))
    assert prof.base == str(b)
    assert prof.experts == {'math': str(e)}


def test_architecture_mismatch_named(tmp_path, tok):
    a, b = _save_tiny(tmp_path / 'a', tok), _save_tiny(tmp_path / 'b', tok, hidden_size=48)
    with pytest.raises(ValueError, match='hidden_size'):
        check_compatible({'base': a, 'code': b})


def test_vocab_mismatch_named(tmp_path, tok):
    other = train_tokenizer(['completely different text here'] * 30, vocab_size=280)
    a = _save_tiny(tmp_path / 'a', tok)
    b = tmp_path / 'b'
    m = tiny_llama(vocab_size=len(tok))
    m.save_pretrained(b)
    other.save_pretrained(b)
    with pytest.raises(ValueError, match='different ids'):
        check_compatible({'base': a, 'code': b})  # the same size, ids that disagree


def test_training_is_deterministic(tok):
    docs = [[('Question: 1 + 2?\nAnswer:', False), (' 3', True)], [('def f(x):\n    return x + 1\n', True)]] * 8
    rows = pack(tok, docs, 16)
    runs = []
    for _ in range(2):
        m = tiny_llama(vocab_size=len(tok), seed=5)
        runs.append((train_lm(m, rows, steps=5, lr=1e-3, batch=4, seed=3), next(m.parameters()).detach().clone()))
    assert runs[0][0] == runs[1][0]
    assert torch.equal(runs[0][1], runs[1][1])
    t2 = train_tokenizer(['def f(x):\n    return x + 1\n', 'Question: 1 + 2?\nAnswer: 3'] * 20, vocab_size=300)
    assert t2.get_vocab() == tok.get_vocab()


def test_the_shipped_zoo_is_whole_and_made_by_this_recipe():
    """The shipped toy zoo (issue 26): its manifest hashes to REFERENCE_ZOOS, every file to its entry, every model to
    the recipe in this code; a rebuilt zoo is another, named zoo."""
    from darts_nb.zoo import check_reference, get_profile, reference_dir, zoo_dir, REFERENCE_ZOOS

    paths = check_reference('toy')
    assert set(REFERENCE_ZOOS) == {'toy'}
    assert paths['base'] == reference_dir('toy') / 'base'
    assert get_profile('toy').base == str(paths['base'])
    assert get_profile('toy-rebuilt', build=False).base == str(zoo_dir('toy') / 'base') != str(paths['base'])
