"""Ship a zoo built here as the package's reference zoo: copy its model folders into darts_nb/data/zoo-<size>, write
their manifest (every file's sha256) and print the hash to write into zoo.REFERENCE_ZOOS.

Run once, after `darts zoo --size toy --rebuild` (or a build in another DARTS_HOME) has made the zoo to ship:
    python tools/ship_zoo.py --src ~/.cache/darts_nb/zoo-toy-rebuilt --size toy
The shipped folder is replaced whole; build.json (where and how long the build took) travels beside the models."""

import argparse
import json
import shutil
import sys
from pathlib import Path

from darts_nb.zoo import ROLES, manifest_hash, zoo_manifest

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--src', required=True, help='the built zoo folder (holding base, code, math, instruct)')
    ap.add_argument('--size', default='toy')
    a = ap.parse_args(argv)
    src, dest = Path(a.src).expanduser(), ROOT / 'darts_nb' / 'data' / f'zoo-{a.size}'
    missing = [r for r in ROLES if not (src / r / 'zoo.json').is_file()]
    if missing:
        print(f'FAIL: {src} has no finished {missing}', file=sys.stderr)
        return 1
    if dest.exists():
        shutil.rmtree(dest)
    for r in ROLES:
        shutil.copytree(src / r, dest / r)
    if (src / 'build.json').is_file():
        shutil.copy2(src / 'build.json', dest / 'build.json')
    manifest = zoo_manifest(dest)
    (dest / 'manifest.json').write_text(json.dumps(manifest, indent=1, sort_keys=True) + '\n')
    print(f'shipped {len(manifest)} files into {dest}; REFERENCE_ZOOS[{a.size!r}] = {manifest_hash(manifest)!r}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
