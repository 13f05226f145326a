"""A trained module shared like a PEFT adapter (issue 17): a model card in every saved folder, from_pretrained from a
folder or the hub (mocked: nothing reaches the network), push_to_hub through huggingface_hub's API (a stand-in that
records the calls)."""

from pathlib import Path
import pytest
import torch
from darts_nb.surgery import SurgeryModule, PositionSurgery, save_surgery, CONFIG, WEIGHTS, CARD


def trained():
    m = PositionSurgery(32, 4, 16)
    with torch.no_grad():
        m.b.normal_()
        m.up.weight.normal_()
    return m


def test_card_says_what_the_module_corrects_and_its_results(tmp_path):
    p = save_surgery(
        trained(),
        tmp_path / 'm',
        merged_model='org/merged-ta',
        expert='org/math-expert',
        domain='math',
        loss='ewl1',
        seed=3,
        rho_l1=0.42,
        scores={'exact_match': '31.7 ± 4.2'},
    )
    card = (p / CARD).read_text()
    for s in (
        'base_model: org/merged-ta',
        'towards the expert `org/math-expert` on `math`',
        'the `ewl1` loss, seed 3',
        'Held-out rho_L1: 0.42',
        '| exact_match | 31.7 ± 4.2 |',
        'SurgeryModule.from_pretrained',
    ):
        assert s in card, s


def test_from_pretrained_reads_a_folder_or_a_hub_repo(tmp_path, monkeypatch):
    m = trained()
    p = save_surgery(m, tmp_path / 'm', domain='math')
    assert torch.equal(SurgeryModule.from_pretrained(p).b, m.b)
    asked = {}

    def snapshot_download(repo_id, revision=None, allow_patterns=None):  # the hub, as huggingface_hub answers it
        asked.update(repo_id=repo_id, revision=revision, patterns=allow_patterns)
        return str(p)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, 'snapshot_download', snapshot_download)
    back = SurgeryModule.from_pretrained('org/darts-math', revision='v1', expect_hidden=32)
    assert torch.equal(back.b, m.b) and asked == dict(
        repo_id='org/darts-math', revision='v1', patterns=[CONFIG, WEIGHTS, CARD]
    )
    with pytest.raises(ValueError, match='hidden size is 64'):
        SurgeryModule.from_pretrained(p, expect_hidden=64)


class FakeApi:
    "What push_to_hub asks of huggingface_hub.HfApi, recorded (and the uploaded folder's files kept)."

    def __init__(self):
        self.calls, self.files = [], {}

    def create_repo(self, repo_id, private=None, exist_ok=False):
        self.calls.append(('create_repo', repo_id, private, exist_ok))

    def upload_folder(self, folder_path, repo_id, commit_message):
        self.calls.append(('upload_folder', repo_id, commit_message))
        self.files = {f.name: f.read_bytes() for f in Path(folder_path).iterdir()}
        return f'https://huggingface.co/{repo_id}/commit/abc'


def test_push_to_hub_uploads_config_weights_and_card(tmp_path):
    m = trained()
    m.meta = {'domain': 'math', 'seed': 1}
    api = FakeApi()
    url = m.push_to_hub('org/darts-math', private=True, api=api, merged_model='org/merged-ta')
    assert url.endswith('/commit/abc') and api.calls[0] == ('create_repo', 'org/darts-math', True, True)
    assert sorted(api.files) == sorted([CONFIG, WEIGHTS, CARD]) and b'org/merged-ta' in api.files[CARD]
    (tmp_path / 'back').mkdir()
    for n, b in api.files.items():
        (tmp_path / 'back' / n).write_bytes(b)
    assert torch.equal(SurgeryModule.from_pretrained(tmp_path / 'back').b, m.b)  # what was uploaded loads back
