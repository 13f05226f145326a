"""Record what the full programme's sweep found on the shipped zoo (darts_nb/data/zoo-<size>/sweep.json), so that
the quick demo's core claims rest on the merges the full programme chooses (`runs.sweep_grid`, `runs.sweep_basis`).

Run once, after the full programme has run on the shipped zoo (a run without --quick or --eval-limit):
    darts run --profile toy --name full --workers 2
    python tools/ship_sweep.py --name full
The file holds each family's best merge, the number of merges and items it rests on, each merge's mean score, and
when and where it was measured. It lies beside the models, outside the manifest: the zoo's hash does not change."""

import argparse
import json
import os
import platform
import sys
from datetime import date
from pathlib import Path

from darts_nb.runs import best_merges, open_run, sweep_grid, sweep_table, task_rows

ROOT = Path(__file__).resolve().parent.parent


def sweep_record(name: str) -> dict:
    "What the full sweep of run `name` found: best merge per family, what it rests on, every merge's mean score."
    run = open_run(name)
    if run.options.quick or run.options.eval_limit is not None:
        raise SystemExit(
            f'FAIL: run {name!r} is quick or limited (eval_limit={run.options.eval_limit}): ship a full run'
        )
    grid, table = sweep_grid(run), sweep_table(run)
    missing = sorted(set(grid) - set(table.index))
    if missing:
        raise SystemExit(f'FAIL: run {name!r} has not scored {len(missing)} merges of its sweep, e.g. {missing[:3]}')
    rows = task_rows(run, role='merged', surgery_kind='')
    items = int(rows[rows.merge_config.isin(list(grid))].n.min())  # the fewest items any merge was scored on
    return {
        'best': best_merges(run),
        'merges': len(grid),
        'items': items,
        'mean': {m: round(float(v), 4) for m, v in table['mean'].items()},
        'measured': f'{date.today().isoformat()} on {platform.machine()}, {os.cpu_count()} cores, run {name!r}',
        'zoo': run.profile.zoo_size,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--name', required=True, help='a finished full run on the shipped zoo')
    a = ap.parse_args(argv)
    rec = sweep_record(a.name)
    dest = ROOT / 'darts_nb' / 'data' / f"zoo-{rec['zoo']}" / 'sweep.json'
    dest.write_text(json.dumps(rec, indent=1) + '\n')
    print(f"wrote {dest}: best {rec['best']} among {rec['merges']} merges on {rec['items']} items per domain")
    return 0


if __name__ == '__main__':
    sys.exit(main())
