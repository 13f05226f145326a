"""Write README.md from nbs/index.ipynb (markdown cells, the title from its first heading).
nbdev-readme needs quarto, which is not installable everywhere; this needs nothing but the notebook.
usage: python tools/make_readme.py [--check]   (--check: exit 1 when README.md is out of date)"""

import json
import sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent


def render() -> str:
    nb = json.loads((root / 'nbs' / 'index.ipynb').read_text())
    parts = [''.join(c['source']).strip() for c in nb['cells'] if c['cell_type'] == 'markdown']
    head = '<!-- generated from nbs/index.ipynb by tools/make_readme.py: edit the notebook, not this file -->\n\n'
    return head + '\n\n'.join(parts) + '\n'


if __name__ == '__main__':
    text, out = render(), root / 'README.md'
    if '--check' in sys.argv:
        ok = out.exists() and out.read_text() == text
        print('README.md is in sync' if ok else 'FAIL: README.md is out of date: run python tools/make_readme.py')
        sys.exit(0 if ok else 1)
    out.write_text(text)
    print(f'wrote {out}')
