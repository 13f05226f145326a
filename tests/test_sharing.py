"""A trained module shared like a PEFT adapter (issue 17): a model card in every saved folder, from_pretrained from a
folder or the hub (mocked: nothing reaches the network), push_to_hub through huggingface_hub's API (a stand-in that
records the calls)."""

import os
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
    assert torch.equal(back.b, m.b)
    assert asked == dict(repo_id='org/darts-math', revision='v1', patterns=[CONFIG, WEIGHTS, CARD])
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
    assert url.endswith('/commit/abc')
    assert api.calls[0] == ('create_repo', 'org/darts-math', True, True)
    assert sorted(api.files) == sorted([CONFIG, WEIGHTS, CARD])
    assert b'org/merged-ta' in api.files[CARD]
    (tmp_path / 'back').mkdir()
    for n, b in api.files.items():
        (tmp_path / 'back' / n).write_bytes(b)
    assert torch.equal(SurgeryModule.from_pretrained(tmp_path / 'back').b, m.b)  # what was uploaded loads back


# --- issue 27: the exported checkpoint loads with transformers alone -------------------------------------------------

PROBE = r'''
"Load exported checkpoints where darts_nb cannot be imported; write what they compute (argv: job file, out file)."
import sys


class Refuse:
    "A finder before all others: darts_nb and its modules cannot be imported here, whatever is installed."

    asked = []

    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] == 'darts_nb':
            Refuse.asked.append(name)
            raise ImportError(f'{name} is refused in this process')


sys.meta_path.insert(0, Refuse())
try:
    import darts_nb  # noqa: F401
    sys.exit('the guard failed: darts_nb was imported')
except ImportError:
    pass
Refuse.asked.clear()
import torch
from transformers import AutoModelForCausalLM

job = torch.load(sys.argv[1])
enc, out = job['enc'], {}


def run(m):
    with torch.no_grad():
        return dict(
            cls=type(m).__name__,
            kind=m._darts_surgery['module'].kind,
            logits=m(**enc).logits,
            gen=m.generate(**enc, max_new_tokens=job['new'], do_sample=False),
        )


for key, where in job['load'].items():
    m = AutoModelForCausalLM.from_pretrained(where, trust_remote_code=True).eval()
    out[key] = run(m)
    if key == job['save']:  # saved by the loaded model, loaded again: still the corrected model
        m.save_pretrained(job['again'])
        out['again'] = run(AutoModelForCausalLM.from_pretrained(job['again'], trust_remote_code=True).eval())
out['asked'] = list(Refuse.asked)
out['loaded'] = sorted(n for n in sys.modules if n.split('.')[0] == 'darts_nb')
torch.save(out, sys.argv[2])
'''


@pytest.fixture(scope='module')
def base():
    from darts_nb.core import darts_home

    p = darts_home() / 'zoo-ci' / 'base'
    assert (p / 'model.safetensors').exists(), f'the ci zoo is built by `make zoo-ci` ({p})'
    return p


def random_module(kind, hidden):
    from darts_nb.surgery import make_surgery

    m = make_surgery(kind, hidden, rank=8, max_len=512)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return m


def hub_cache(root: Path, repo_id: str, folder: Path) -> Path:
    "An offline hub cache holding `folder` as `repo_id` at one commit, laid out as huggingface_hub writes it."
    import shutil

    repo = root / ('models--' + repo_id.replace('/', '--'))
    commit = '0123456789abcdef0123456789abcdef01234567'
    shutil.copytree(folder, repo / 'snapshots' / commit)
    (repo / 'refs').mkdir(parents=True)
    (repo / 'refs' / 'main').write_text(commit)
    return root


def test_an_export_loads_with_transformers_alone_in_a_fresh_process(base, tmp_path):
    "Where `import darts_nb` fails: the attached model's logits on a left-padded batch and its greedy generation."
    import subprocess
    import sys
    from darts_nb.deploy import export_corrected
    from darts_nb.surgery import surgery
    from darts_nb.zoo import load_model

    model, tok = load_model(str(base), 'cpu')
    tok.padding_side = 'left'
    enc = dict(tok(['Q: 2 + 3 = ', 'Q: what is 17 times 3? Think, then answer.'], padding=True, return_tensors='pt'))
    assert enc['attention_mask'][0, 0] == 0  # the batch is left-padded
    new = 12
    with torch.no_grad():
        plain = model(**enc).logits
        want = {}
        for kind in ('position', 'standard'):
            module = random_module(kind, model.config.hidden_size)
            export_corrected(model, module, tmp_path / kind, tokenizer=tok, domain='math')
            with surgery(model, module):
                want[kind] = dict(
                    logits=model(**enc).logits, gen=model.generate(**enc, max_new_tokens=new, do_sample=False)
                )
            assert not torch.allclose(want[kind]['logits'], plain, atol=1e-3)  # the module changes the logits
    card = (tmp_path / 'position' / 'README.md').read_text()  # the model card: how to load it, what it corrects
    for s in ('trust_remote_code=True', 'darts_nb is not needed', 'DARTS, Eq. 4', 'on `math`', 'AutoTokenizer'):
        assert s in card, s
    hub = hub_cache(tmp_path / 'hub', 'me/darts-math', tmp_path / 'position')
    load = {'position': str(tmp_path / 'position'), 'standard': str(tmp_path / 'standard'), 'hub': 'me/darts-math'}
    job = dict(enc=enc, new=new, load=load, save='position', again=str(tmp_path / 'again'))
    torch.save(job, tmp_path / 'job.pt')
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(('PYTHON', 'HF_'))},
        'HF_HUB_OFFLINE': '1',
        'HF_HUB_CACHE': str(hub),
        'HF_MODULES_CACHE': str(tmp_path / 'hf_modules'),
        'TRANSFORMERS_NO_ADVISORY_WARNINGS': '1',
    }
    r = subprocess.run(
        [sys.executable, '-I', '-c', PROBE, str(tmp_path / 'job.pt'), str(tmp_path / 'got.pt')],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    got = torch.load(tmp_path / 'got.pt')
    assert got['asked'] == [], (got['asked'], got['loaded'])
    assert got['loaded'] == [], (got['asked'], got['loaded'])  # nothing even tried darts_nb
    for key, kind in (('position', 'position'), ('standard', 'standard'), ('hub', 'position'), ('again', 'position')):
        assert (got[key]['cls'], got[key]['kind']) == ('DartsForCausalLM', kind), key
        assert torch.equal(got[key]['logits'], want[kind]['logits']), key
        assert torch.equal(got[key]['gen'], want[kind]['gen']), key


def test_the_modelling_file_is_the_packages_own_code_and_needs_torch_and_transformers_only():
    "Every definition in it is the live source of the package's definition of that name; its imports are checked."
    import ast
    import importlib
    import inspect
    import sys
    from darts_nb.deploy import modeling_source

    src = modeling_source('LlamaForCausalLM')
    tree = ast.parse(src)
    tops = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            tops |= {a.name.split('.')[0] for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            assert n.level == 0, ast.unparse(n)  # no relative import: one file
            tops.add(n.module.split('.')[0])
    assert tops - set(sys.stdlib_module_names) == {'torch', 'transformers'}, tops
    mods = [importlib.import_module(f'darts_nb.{m}') for m in ('core', 'surgery', 'hooks', 'surgery_files', 'deploy')]
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert defs[-1].name == 'DartsForCausalLM'
    assert len(defs) > 20
    for n in defs[:-1]:
        owners = [m for m in mods if n.name in vars(m)]
        assert owners, f'{n.name}: defined in the modelling file, not in darts_nb'
        assert inspect.getsource(getattr(owners[-1], n.name)) == ast.get_source_segment(src, n) + '\n', n.name
    names = {n.name for n in defs}
    for need in ('PositionSurgery', 'StandardSurgery', 'call_positions', '_hook_surgery', 'positions_from_mask'):
        assert need in names, need


# --- issue 29: a config field is data in the card, never structure ---------------------------------------------------

INJECTIONS = [  # (field, value): each would add a key to the card's YAML header, or a heading, if pasted in raw
    ('merged_model', 'org/m\nlicense: mit'),
    ('merged_model', 'org/m\n---\n# pwned'),
    ('merged_model', 'a: b'),
    ('merged_model', '"quoted" and \'single\''),
    ('merged_model', 'x\r\ninference: false'),
    ('domain', 'math\n---\nlicense: mit'),
    ('expert', 'e\u2028license: mit'),
]


def front_matter(card: str) -> dict:
    import yaml

    assert card.startswith('---\n')
    return yaml.safe_load(card.split('\n---\n', 1)[0][4:])


@pytest.mark.parametrize('field,value', INJECTIONS, ids=[repr(v) for _, v in INJECTIONS])
def test_a_field_cannot_add_to_the_cards_header(field, value):
    "surgery_card and deploy.corrected_card given raw fields (a config that bypassed the checks): same keys, same text."
    from darts_nb.surgery import surgery_card
    from darts_nb.deploy import corrected_card

    cfg = {**trained().config(), 'merged_model': 'org/m', 'domain': 'math', 'scores': {'em|x': 'a\nb'}, field: value}
    card = surgery_card(cfg)
    head = front_matter(card)
    assert sorted(head) == ['base_model', 'library_name', 'tags']
    assert head['base_model'] == cfg['merged_model']
    body = card.split('\n---\n', 1)[1]
    assert [ln for ln in body.splitlines() if ln.startswith('#')] == [body.splitlines()[0]]  # one heading
    assert '| em\\|x | a\\nb |' in body  # one table row
    exported = front_matter(corrected_card(cfg, 'LlamaForCausalLM'))
    assert sorted(exported) == ['base_model', 'library_name', 'tags']
    assert exported['base_model'] == cfg['merged_model']


def test_a_newline_in_a_saved_config_is_not_republished(tmp_path):
    "A config edited to hold a newline: loading it is refused, so push_to_hub never publishes it; saving it too."
    import json

    p = save_surgery(trained(), tmp_path / 'm', merged_model='org/merged-ta', domain='math')
    cfg = json.loads((p / CONFIG).read_text())
    (p / CONFIG).write_text(json.dumps({**cfg, 'merged_model': 'org/merged-ta\nlicense: mit'}))
    with pytest.raises(ValueError, match='merged_model: expected one line of text'):
        SurgeryModule.from_pretrained(p)
    m, api = trained(), FakeApi()
    m.meta = {**cfg, 'domain': 'math\nlicense: mit'}
    with pytest.raises(ValueError, match='domain: expected one line of text'):
        m.push_to_hub('org/darts-math', api=api)
    assert api.calls == []  # nothing uploaded, not even a repo created
    url = m.push_to_hub('org/darts-math', api=api, domain='math')  # the field given again, on one line
    assert url.endswith('/commit/abc')
    assert sorted(front_matter(api.files[CARD].decode())) == [
        'base_model',
        'library_name',
        'tags',
    ]
