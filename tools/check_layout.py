"""Check the library's layout: no import cycle among the darts_nb modules, and no module over 500 lines.

Every import counts, at module level or inside a function (a deferred import is still a dependency:
a cycle through one means two modules that cannot be understood apart). nbdev's generated index
(_modidx.py) is left out.
usage: python tools/check_layout.py [--max-lines N]"""
import argparse, ast, sys
from pathlib import Path

PKG = 'darts_nb'
root = Path(__file__).resolve().parent.parent

def imports(path: Path, modules: set) -> set:
    "The darts_nb modules `path` imports anywhere in its code."
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level: base = f'{PKG}.{base}' if base else PKG
            if base == PKG: out |= {a.name for a in node.names if a.name in modules}
            elif base.startswith(PKG + '.'): out.add(base.split('.')[1])
        elif isinstance(node, ast.Import):
            out |= {a.name.split('.')[1] for a in node.names if a.name.startswith(PKG + '.') and a.name.split('.')[1] in modules}
    return out - {path.stem}

def graph() -> dict:
    files = {p.stem: p for p in (root/PKG).glob('*.py') if p.stem not in ('_modidx', '__init__')}
    return {m: imports(p, set(files)) for m, p in sorted(files.items())}

def find_cycle(g: dict) -> list|None:
    "One import cycle as a list of modules (first == last), or None."
    state, stack = {}, []
    def visit(m):
        state[m] = 'open'; stack.append(m)
        for n in sorted(g.get(m, ())):
            if state.get(n) == 'open': return stack[stack.index(n):] + [n]
            if n not in state and (c := visit(n)): return c
        state[m] = 'done'; stack.pop()
        return None
    for m in g:
        if m not in state and (c := visit(m)): return c
    return None

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--max-lines', type=int, default=500)
    a = ap.parse_args(argv)
    errs, g = [], graph()
    if (c := find_cycle(g)): errs.append('import cycle: ' + ' -> '.join(c))
    for p in sorted((root/PKG).glob('*.py')):
        n = len(p.read_text().splitlines())
        if p.stem != '_modidx' and n > a.max_lines: errs.append(f'{p.relative_to(root)} has {n} lines (at most {a.max_lines}); split the concept')
    if errs:
        print('FAIL: ' + '\n'.join(errs), file=sys.stderr); return 1
    print(f'layout ok: {len(g)} modules, no import cycle, none over {a.max_lines} lines')
    return 0

if __name__ == '__main__': sys.exit(main())
