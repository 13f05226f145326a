"""The AlpacaEval judge for real: alpaca_eval's own annotators against a stand-in OpenAI endpoint on 127.0.0.1.

The stand-in (darts_nb.stand_in_judge) prefers the longer output, so every win rate is known before it is asked;
it counts its requests, and it is the proxy of every other address, so a request that would leave the machine is
recorded (`leaks`) and refused."""

import json
import os
import warnings
from pathlib import Path
from unittest.mock import patch
import pytest
from darts_nb.core import write_json
from darts_nb.evaluate import EvalSettings, evaluate_model
from darts_nb.judge import JudgeError, check_judge, judge_alpaca_eval, judge_dir
from darts_nb.stand_in_judge import StandInJudge, stand_in_glm, stand_in_preference

N = 6
REF = [
    dict(
        instruction=f'Describe place {i}.',
        output='It is ' + 'quite ' * (2 * i) + 'nice.',
        generator='gpt-3.5-turbo-0613',
        dataset='toy',
    )
    for i in range(N + 2)  # the reference holds more instructions than are scored, as the paper's 805 do
]
OUTS = [
    dict(instruction=f'Describe place {i}.', output='A quiet place by the water.', generator='merged', dataset='toy')
    for i in range(N)
]
OUTS[2]['output'] = REF[2]['output']  # the same output as the reference: a tie, which alpaca_eval never asks about
CONFIGS = {  # config -> (the model it asks for, what the stand-in's preferred output scores, 0..100)
    'alpaca_eval_gpt4': ('gpt-4', 100.0),  # a ranking, as Python text
    'alpaca_eval_gpt4_turbo_fn': ('gpt-4-1106-preview', 100.0),  # a ranking, as a function call
    'weighted_alpaca_eval_gpt4_turbo': ('gpt-4-1106-preview', 75.0),  # logprobs: the preferred one at 3/4
}


def expected_items(win: float, outs=OUTS) -> dict:
    "Each instruction's score (%) by the stand-in's rule: `win` when the model's output is preferred."
    ref = {r['instruction']: r['output'] for r in REF}
    out = {}
    for o in outs:
        a, b = ref[o['instruction']], o['output']
        out[o['instruction']] = 50.0 if a == b else (win if stand_in_preference(a, b) == 2 else 100.0 - win)
    return out


@pytest.fixture
def files(tmp_path, monkeypatch):
    "The reference and the model's outputs on disk, and an empty hub cache (no GLM data unless a test adds it)."
    monkeypatch.setenv('HF_HUB_CACHE', str(tmp_path / 'hub'))
    for k in ('OPENAI_BASE_URL', 'OPENAI_API_BASE', 'OPENAI_API_KEY'):  # the judge's endpoint: each test's own
        monkeypatch.delenv(k, raising=False)
    return write_json(tmp_path / 'reference.json', REF), write_json(tmp_path / 'merged_seed0_outputs.json', OUTS)


def judged(outputs: Path, judge: str, reference: Path, env: dict):
    "judge_alpaca_eval under `env`, its warnings kept: (result, warning texts)."
    with patch.dict(os.environ, env), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        res = judge_alpaca_eval(outputs, judge, reference=reference)
    return res, [str(x.message) for x in w]


def error_of(outputs: Path, judge: str, reference: Path, env: dict) -> str:
    "The message of the JudgeError that judging under `env` raises."
    with pytest.raises(JudgeError) as e:
        judged(outputs, judge, reference, env)
    return str(e.value)


@pytest.mark.parametrize('config', list(CONFIGS))
def test_each_answer_format_gives_the_known_win_rate_and_a_second_judging_asks_nothing(files, config):
    ref, outs = files
    model, win = CONFIGS[config]
    items = expected_items(win)
    with StandInJudge() as judge:
        res, w = judged(outs, config, ref, judge.env())
        asked = len(judge.requests)
        again, _ = judged(outs, config, ref, judge.env())
    assert res['items'] == pytest.approx(items)
    assert [r['metric'] for r in res['rows']] == ['win_rate']  # no GLM data in the hub cache: no LC win rate
    assert res['rows'][0]['value'] == pytest.approx(sum(items.values()) / N)
    assert res['rows'][0]['n'] == N
    assert any('length-controlled win rate not computed' in m for m in w), w
    assert asked == N - 1, judge.requests  # one request per pair, none for the tie
    assert {r['model'] for r in judge.requests} == {model}
    assert judge.leaks == []
    assert len(judge.requests) == asked
    assert again == res  # the second judging read alpaca_eval's cache
    folder = judge_dir(outs, config)
    annotations = json.loads((folder / 'annotations.json').read_text())
    assert len(annotations) == N
    assert (folder / 'leaderboard.csv').read_text().count('\n') == 2
    cached = json.loads((folder / 'cached_annotations.json').read_text())
    assert len(cached) == N
    assert all(1 <= c['preference'] <= 2 for c in cached)
    assert not [p for p in folder.parent.parent.rglob('.*tmp-*')]  # no working copy left behind


def test_only_new_pairs_are_asked(files, tmp_path):
    ref, outs = files
    first = write_json(tmp_path / 'merged_seed0_outputs.json', OUTS[:3])
    with StandInJudge() as judge:
        judged(first, 'alpaca_eval_gpt4', ref, judge.env())
        assert len(judge.requests) == 2  # three pairs, one of them a tie
        write_json(outs, OUTS)
        res, _ = judged(outs, 'alpaca_eval_gpt4', ref, judge.env())
    assert len(judge.requests) == 2 + 3
    assert res['items'] == pytest.approx(expected_items(100.0))


FAILURES = {  # case -> (stand-in mode, closed before judging, OPENAI_BASE_URL kept, what the message says)
    'endpoint down': ('judge', True, True, 'failed: APIConnectionError: Connection error.'),
    'HTTP 500': ('error', False, True, 'failed: InternalServerError: Error code: 500'),
    'garbage answers': ('garbage', False, True, 'of 6 answers could not be read as a preference'),
    'no OPENAI_BASE_URL': ('judge', False, False, 'failed: APIConnectionError: Connection error.'),
}


@pytest.mark.parametrize('case', list(FAILURES))
def test_a_failing_judge_is_a_clear_error_and_leaves_no_score(files, case):
    ref, outs = files
    mode, closed, base_url, says = FAILURES[case]
    judge = StandInJudge(mode)
    env = judge.env()
    if not base_url:
        del env['OPENAI_BASE_URL']  # the client's default, api.openai.com, reached through the stand-in as proxy
    if closed:
        judge.close()
    try:
        msg = error_of(outs, 'alpaca_eval_gpt4', ref, env)
    finally:
        if not closed:
            judge.close()
    assert msg.startswith("AlpacaEval judge 'alpaca_eval_gpt4'"), msg
    assert says in msg, msg
    assert f'at {env.get("OPENAI_BASE_URL", "https://api.openai.com/v1")};' in msg, msg
    assert 'nothing recorded as a score' in msg, msg
    assert str(outs) in msg, msg
    if mode == 'garbage':
        assert '5 of 6 answers could not be read as a preference (' in msg, msg  # and one of them:
        assert 'I would rather not say which one is better.' in msg, msg
    if case == 'endpoint down':
        assert 'Connection refused' in msg, msg
        assert judge.requests == [], msg
    if case == 'HTTP 500':
        assert len(judge.requests) >= 3
        assert {r['mode'] for r in judge.requests} == {'error'}  # the client retried
    if base_url:
        assert judge.leaks == []
    else:
        assert judge.leaks, judge.leaks
        assert all(x.startswith('CONNECT api.openai.com:443') for x in judge.leaks), judge.leaks
    # nothing that looks like a result: no annotations, no leaderboard, no judgment of the judge's in the cache
    # (an answer that failed or could not be read is asked again); a judging that got answers keeps the tie,
    # alpaca_eval's own judgment (never asked)
    folder = judge_dir(outs, 'alpaca_eval_gpt4')
    cache = folder / 'cached_annotations.json'
    assert sorted(p.name for p in folder.iterdir()) == sorted(['judge.log'] + [cache.name] * (mode == 'garbage'))
    if mode == 'garbage':
        cached = json.loads(cache.read_text())
        assert [(c['instruction'], c['preference']) for c in cached] == [('Describe place 2.', 1.5)], cached
    with StandInJudge() as good:
        res, _ = judged(outs, 'alpaca_eval_gpt4', ref, good.env())
    assert len(good.requests) == N - 1
    assert res['items'] == pytest.approx(expected_items(100.0))


def test_length_controlled_win_rate_from_the_glm_data_in_the_hub_cache(files, tmp_path):
    ref, outs = files
    stand_in_glm(tmp_path / 'hub', n=len(REF))
    with StandInJudge() as judge:
        res, w = judged(outs, 'weighted_alpaca_eval_gpt4_turbo', ref, judge.env())
    assert [r['metric'] for r in res['rows']] == ['win_rate', 'lc_win_rate'], res['rows']
    lc = res['rows'][1]
    assert 0 < lc['value'] < 100, lc
    assert lc['stderr'] > 0, lc
    assert lc['n'] == N, lc
    assert lc['value'] != pytest.approx(res['rows'][0]['value'])  # the GLM's own estimate, not the raw win rate
    assert not [m for m in w if 'length-controlled' in m], w
    assert judge.leaks == [], w  # read from the cache, offline


def test_bad_judge_settings_are_refused_before_any_request(files, tmp_path):
    ref, outs = files
    with pytest.raises(JudgeError, match=r"judge: expected one of alpaca_eval's annotators configs .* got 'gpt-4'"):
        check_judge('gpt-4', reference=ref)
    with pytest.raises(
        JudgeError, match="judge: expected the name or path of an alpaca_eval annotators config, got ''"
    ):
        check_judge('', reference=ref)
    with pytest.raises(FileNotFoundError, match='reference outputs .* are missing .darts fetch --profile llama2-7b'):
        check_judge('alpaca_eval_gpt4', reference=tmp_path / 'none.json')
    short = write_json(tmp_path / 'short.json', REF[:4])
    doubled = write_json(tmp_path / 'doubled.json', REF + REF[:1])
    with StandInJudge() as judge:
        msg = error_of(outs, 'alpaca_eval_gpt4', short, judge.env())
        assert "hold 2 of the 6 instructions of" in msg, msg
        assert "'Describe place 4.', 0 times" in msg, msg
        msg = error_of(outs, 'alpaca_eval_gpt4', doubled, judge.env())
        assert "hold 1 of the 6 instructions" in msg, msg
        assert "'Describe place 0.', 2 times" in msg, msg
    assert judge.requests == []
    assert not judge_dir(outs, 'alpaca_eval_gpt4').exists()


def test_a_judge_config_of_ones_own(files, tmp_path):
    "A configs.yaml path (e.g. for GPT-4.1, the paper's judge): alpaca_eval's prompt and parser, another model."
    import alpaca_eval

    ref, outs = files
    src = Path(alpaca_eval.__file__).parent / 'evaluators_configs' / 'alpaca_eval_gpt4'
    cfg = tmp_path / 'gpt41_judge' / 'configs.yaml'
    cfg.parent.mkdir()
    (cfg.parent / 'alpaca_eval.txt').write_text((src / 'alpaca_eval.txt').read_text())
    cfg.write_text(
        (src / 'configs.yaml')
        .read_text()
        .replace('alpaca_eval_gpt4:', 'gpt41_judge:', 1)
        .replace('alpaca_eval_gpt4/alpaca_eval.txt', 'gpt41_judge/alpaca_eval.txt')
        .replace('"gpt-4"', '"gpt-4.1"')
    )
    with StandInJudge() as judge:
        res, _ = judged(outs, str(cfg), ref, judge.env())
    assert {r['model'] for r in judge.requests} == {'gpt-4.1'}
    assert len(judge.requests) == N - 1
    assert res['items'] == pytest.approx(expected_items(100.0))
    assert (judge_dir(outs, str(cfg)) / 'annotations.json').exists()
    assert judge_dir(outs, str(cfg)).name == 'gpt41_judge'


def test_evaluate_model_records_the_judged_win_rate_and_its_items(tmp_path, monkeypatch, code_model):
    "The package's scoring path: lm-eval generates, alpaca_eval judges through the stand-in, rows and items come back."
    m, tok = code_model
    monkeypatch.setenv('HF_HUB_CACHE', str(tmp_path / 'hub'))
    items = [
        dict(instruction=f'Say {i}.', output='Sure: ' + 'ok ' * i, generator='gpt-3.5-turbo-0613', dataset='toy')
        for i in range(53)
    ]
    ae = write_json(tmp_path / 'alpaca.json', items)  # the benchmark (50 calibration items held out) and reference
    kw = dict(
        profile='paper', paths={'instruct': ae}, eval_limit=3, max_new_tokens=6, batch_size=3, judge='alpaca_eval_gpt4'
    )
    with StandInJudge() as judge, patch.dict(os.environ, judge.env()), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        df = evaluate_model(m, tok, ['instruct'], settings=EvalSettings(out_dir=tmp_path / 'out', reference=ae, **kw))
    outs = json.loads(Path(df.attrs['alpaca_eval_outputs']).read_text())
    ref = {r['instruction']: r['output'] for r in items}
    scores = [
        50.0
        if ref[o['instruction']] == o['output']
        else 100.0 * (stand_in_preference(ref[o['instruction']], o['output']) == 2)
        for o in outs
    ]
    assert df.metric.tolist() == ['win_rate'], df
    assert df.n.tolist() == [3], df  # no 'generated' count beside a score
    assert df.value.iloc[0] == pytest.approx(sum(scores) / 3)
    its = df.attrs['items']
    assert its.metric.tolist() == ['win_rate'] * 3, its
    assert its.item.str.startswith('alpacaeval').all(), its
    assert its.value.mean() == pytest.approx(df.value.iloc[0])  # the items' mean is the win rate
    assert len(judge.requests) == sum(s != 50.0 for s in scores)
    assert judge.leaks == []
    assert Path(df.attrs['alpaca_eval_annotations']).exists()
    down = StandInJudge()
    down.close()
    with patch.dict(os.environ, down.env()), warnings.catch_warnings(), pytest.raises(JudgeError, match='Connection'):
        warnings.simplefilter('ignore')
        evaluate_model(m, tok, ['instruct'], settings=EvalSettings(out_dir=tmp_path / 'down', reference=ae, **kw))
    assert len(list((tmp_path / 'down').glob('*_outputs.json'))) == 1  # the generations stay, for another judging
