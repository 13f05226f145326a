"darts fetch's plan, without the network: the hub's dry run is replaced by a fake listing of a real-looking repo."

import huggingface_hub
from huggingface_hub.file_download import DryRunFileInfo
from darts_nb import hub

REPO_FILES = {  # what a Llama-2 repo holds: both weight formats, configs, a tokenizer, docs
    'model': [
        ('config.json', 600),
        ('generation_config.json', 200),
        ('model-00001-of-00002.safetensors', 9_976_576_152),
        ('model-00002-of-00002.safetensors', 3_500_296_424),
        ('pytorch_model-00001-of-00002.bin', 9_976_634_558),
        ('pytorch_model-00002-of-00002.bin', 3_500_315_539),
        ('tokenizer.model', 499_723),
        ('tokenizer.json', 1_842_767),
        ('tokenizer_config.json', 776),
        ('special_tokens_map.json', 414),
        ('README.md', 10_000),
        ('LICENSE.txt', 7_000),
    ],
    'dataset': [('main/test-00000-of-00001.parquet', 419_088), ('alpaca_eval.json', 620_000)],
}


def fake_snapshot_download(repo_id, repo_type=None, cache_dir=None, allow_patterns=None, dry_run=False, **kw):
    assert dry_run, 'the plan must not download'
    files = REPO_FILES[repo_type or 'model']
    if allow_patterns:
        files = [f for f in files if f[0] == allow_patterns]
    return [
        DryRunFileInfo(
            commit_hash='0' * 40,
            file_size=n,
            filename=f,
            local_path='',
            is_cached=f == 'config.json',
            will_download=f != 'config.json',
        )
        for f, n in files
    ]


def test_plan_keeps_one_copy_of_the_weights_and_counts_the_bytes(monkeypatch, tmp_path):
    monkeypatch.setattr(huggingface_hub, 'snapshot_download', fake_snapshot_download)
    monkeypatch.setenv('HF_HUB_CACHE', str(tmp_path))
    plan = hub.fetch_plan()
    models = plan[plan.kind == 'model']
    assert set(models.repo) == set(hub.PAPER_MODELS.values())
    assert not models.file.str.endswith('.bin').any()
    assert not models.file.isin(['README.md', 'LICENSE.txt']).any()
    assert models.file.str.endswith('.safetensors').sum() == 2 * len(hub.PAPER_MODELS)
    assert list(plan[plan.kind == 'dataset'].file) == [f for _, f in hub.PAPER_DATASETS.values()]
    line = hub.plan_summary(plan)
    todo = plan[~plan.cached].bytes.sum()
    assert f'{todo / 1e9:.2f} GB' in line, line
    assert f'{len(plan[~plan.cached])} of {len(plan)} files' in line, line


def test_fetch_dry_run_downloads_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(huggingface_hub, 'snapshot_download', fake_snapshot_download)
    monkeypatch.setenv('HF_HUB_CACHE', str(tmp_path))
    monkeypatch.delenv('HF_HUB_OFFLINE', raising=False)
    hub.fetch(dry_run=True)
    assert 'files to download' in capsys.readouterr().out
    assert not any(tmp_path.iterdir())
