"""The routing record's files read back: a damaged routing.csv is refused in one line naming it, never rendered."""

import io
import json
from dataclasses import asdict

import pandas as pd
import pytest

from darts_nb.arms import DARTS
from darts_nb.domains import DOMAINS
from darts_nb.profiles import Profile
from darts_nb.report import write_report
from darts_nb.routing import TRAFFIC_ROWS, traffic_table
from darts_nb.routing_record import ROUTING, ROUTING_DIR, ROUTING_FILES, read_routing
from darts_nb.runs import Run

HEADING = f'## {ROUTING.heading}'


def measured_run(home) -> Run:
    "A run made by hand whose routing folder holds what `measure_routing` writes (from made-up requests)."
    run = Run('routed', Profile('fake', str(home / 'm' / 'base'), {d: str(home / 'm' / d) for d in DOMAINS}))
    routes = {'code': ['code'] * 3 + [None], 'math': ['math'] * 4, 'instruct': ['instruct', 'math', None, 'instruct']}
    items = pd.DataFrame(
        [
            dict(item=f'{d}-{i}', domain=d, route=r, routed=float(i % 2), known=float(i % 2), none=float(i == 0))
            for d, rs in routes.items()
            for i, r in enumerate(rs)
        ]
    )
    folder = run.dir / ROUTING_DIR
    folder.mkdir(parents=True)
    meta = dict(merge='ta-0.5', arm=asdict(DARTS), limit=4, seed=0, inputs='', key='k')
    (folder / ROUTING_FILES['settings']).write_text(json.dumps(meta))
    (folder / ROUTING_FILES['table']).write_text(traffic_table(items).to_csv())
    return run


def test_the_table_is_read_back_and_rendered(home):
    run = measured_run(home)
    meta, t = read_routing(run)
    assert list(t.index) == [name for name, _, _ in TRAFFIC_ROWS]
    assert t.value.iloc[:3].sum() == pytest.approx(100)
    assert t.loc['router picks the right domain (%)', 'value'] == pytest.approx(100 * (3 / 4 + 1 + 2 / 4) / 3)
    text = write_report(run, {'routing': ROUTING}).read_text()
    assert HEADING in text and '| router picks the right domain (%) |' in text


def _drop_row(text: str) -> str:
    lines = text.splitlines()
    return '\n'.join(lines[:3] + lines[4:]) + '\n'


def _change_share(text: str) -> str:
    t = pd.read_csv(io.StringIO(text))
    t.loc[1, 'value'] += 10  # the shares no longer add up to 100 %
    return t.to_csv(index=False)


DAMAGES = {
    'garbage': lambda text: '\x00\x01 not, a "table\n',
    'empty': lambda text: '',
    'a row deleted': _drop_row,
    'a column dropped': lambda text: pd.read_csv(io.StringIO(text)).drop(columns='hi').to_csv(index=False),
    'a share changed': _change_share,
    'a count changed': lambda text: text.replace(',12\n', ',11\n', 1),
}


@pytest.mark.parametrize('damage', list(DAMAGES))
def test_a_damaged_table_is_refused_in_one_line_naming_it(home, damage, capsys):
    run = measured_run(home)
    path = run.dir / ROUTING_DIR / ROUTING_FILES['table']
    path.write_text(DAMAGES[damage](path.read_text()))
    with pytest.raises(ValueError) as e:
        read_routing(run)
    assert str(e.value).startswith(f'{path}: ') and len(str(e.value).splitlines()) == 1
    text = write_report(run, {'routing': ROUTING}).read_text()
    assert HEADING not in text  # never rendered as a table of the run
    line = [x for x in text.splitlines() if x.startswith('- `routing` ')]
    assert len(line) == 1 and str(path) in line[0] and 'not made from the partial data' in line[0]
    assert str(path) in capsys.readouterr().err


def test_damaged_settings_are_refused_naming_them(home):
    run = measured_run(home)
    path = run.dir / ROUTING_DIR / ROUTING_FILES['settings']
    path.write_text('{"merge": "ta-0.5"')
    with pytest.raises(ValueError, match=f'^{path}: unreadable'):
        read_routing(run)


def test_settings_of_no_arm_are_refused_naming_them(home):
    run = measured_run(home)
    path = run.dir / ROUTING_DIR / ROUTING_FILES['settings']
    path.write_text(json.dumps(dict(merge='ta-0.5', limit=4, arm=dict(kind='nonsense'))))
    with pytest.raises(ValueError, match=f'^{path}: not the settings of an arm'):
        read_routing(run)


def test_nothing_measured_has_no_section(home):
    run = Run('empty', Profile('fake', str(home / 'm' / 'base'), {d: str(home / 'm' / d) for d in DOMAINS}))
    assert read_routing(run) is None
    assert ROUTING.section(run, run.dir / 'figures') is None
