"""Check the library's layout: no import cycle, one definition per export cell, every public name in a lesson.

- No import cycle among the darts_nb modules. Every import counts, at module level or inside a function (a deferred
  import is still a dependency: a cycle through one means two modules that cannot be understood apart).
- One definition per export cell: each `#| export` cell defines at most one top-level function or class, so that
  the prose and the lesson after it explain one thing (nbdev's own notebooks: 1.06 definitions per cell).
- Every public name is exercised in its own notebook, outside the export cells: every public function and class,
  and at least 90 % of all public names (constants included). A name counts when a lesson's code uses it (an
  import line alone does not count).
- No call in the library passes more than three arguments by position: a longer call names its arguments, so a
  parameter added in the middle of a signature cannot silently shift the others. The exceptions are named, with
  their reasons, in ALLOWED_POSITIONAL: callees whose arguments have no names to pass them by (C functions through
  ctypes, `select.select`), where naming is impossible and starring a tuple would only hide the call from this rule.
- Names that moved to a module of their own stay importable from their old module through its `_MOVED` table and
  `__getattr__` (darts_nb.core.moved_name): every entry must name a module that defines the name, the old module
  must no longer define it, and no library module may import a moved name from its old home (the graph above would
  then show a dependency that is not there, and a monkeypatch of the old name would patch nothing).
- Rooms and steps of a readable size: no module over 700 lines (a module that grows past it holds several concepts;
  split it along its seams, never pack it: ruff formats every file), no function over 60 lines (a longer one reads
  as steps: name them) and none with more than 6 parameters (`self`/`cls` aside; `*args` and `**kwargs` count one
  each): a longer list is an options object in spirit (a cache's settings, an evaluation's, a sandbox's limits).
  Exceptions are named, with their reasons, in ALLOWED_LONG.
- Lines of at most 120 characters in the library, except the `__all__` that nbdev writes itself (it wraps the list
  at 120 and then adds its 10-character prefix). ruff holds the notebooks to the same limit.

This replaces a cap of 500 lines per module, which rewarded packing statements onto lines rather than measuring
the size of a concept. nbdev's generated index (_modidx.py) is left out.
usage: python tools/check_layout.py [--notebooks NB ...] [--min-share 0.9]"""

import argparse
import ast
import json
import re
import sys
from pathlib import Path

PKG = 'darts_nb'
root = Path(__file__).resolve().parent.parent
MAX_LINE = 120
MIN_SHARE = 0.9
MAX_POSITIONAL = 3
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 60
MAX_PARAMETERS = 6
# Functions ('module.qualified_name') that may be longer or take more parameters than the limits above: the reason
# beside each.
ALLOWED_LONG = {
    'core.check_number': (
        'a validator: the value, its name and a range (two bounds, whether each is open, None allowed), as check_int; '
        'every caller names the bounds by keyword'
    ),
    'losses.compute_loss': (
        "one signature for every loss: its name, the three tensors, the two inputs only some losses need (entropy, "
        "the expert's head) and the loss's own settings passed through"
    ),
}
# Callees (as the call spells them) that take their arguments by position only, and so may take more than
# MAX_POSITIONAL of them: the reason beside each.
ALLOWED_POSITIONAL = {
    'select.select': 'takes its read, write and error lists and its timeout by position only',
    'renameat2': 'a C function (ctypes): its arguments have no names (core._exchange)',
    'libc.prctl': 'a C function (ctypes): its arguments have no names (the sandbox boot program, _boot.py)',
    'libc.mount': 'a C function (ctypes): its arguments have no names (the sandbox boot program, _boot.py)',
    'libc.syscall': 'a C function (ctypes): its arguments have no names (the sandbox boot program, _boot.py)',
}


def imports(path: Path, modules: set) -> set:
    "The darts_nb modules `path` imports anywhere in its code."
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                base = f'{PKG}.{base}' if base else PKG
            if base == PKG:
                out |= {a.name for a in node.names if a.name in modules}
            elif base.startswith(PKG + '.'):
                out.add(base.split('.')[1])
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split('.')
                if parts[0] == PKG and len(parts) > 1 and parts[1] in modules:
                    out.add(parts[1])
    return out - {path.stem}


def graph() -> dict:
    files = {p.stem: p for p in (root / PKG).glob('*.py') if p.stem not in ('_modidx', '__init__')}
    return {m: imports(p, set(files)) for m, p in sorted(files.items())}


def find_cycle(g: dict) -> list | None:
    "One import cycle as a list of modules (first == last), or None."
    state, stack = {}, []

    def visit(m):
        state[m] = 'open'
        stack.append(m)
        for n in sorted(g.get(m, ())):
            if state.get(n) == 'open':
                return stack[stack.index(n) :] + [n]
            if n not in state and (c := visit(n)):
                return c
        state[m] = 'done'
        stack.pop()
        return None

    for m in g:
        if m not in state and (c := visit(m)):
            return c
    return None


def code_cells(nb: Path) -> list[str]:
    "The sources of a notebook's code cells."
    cells = json.loads(nb.read_text())['cells']
    return [''.join(c['source']) for c in cells if c['cell_type'] == 'code']


def is_export(src: str) -> bool:
    return re.match(r'\s*#\|\s*export', src) is not None


def parse(src: str) -> ast.Module:
    "A cell's code as a module (IPython magics and shell lines blanked)."
    lines = ['' if re.match(r'\s*[%!]', line) else line for line in src.splitlines()]
    return ast.parse('\n'.join(lines))


def definitions(tree: ast.Module) -> list[ast.AST]:
    "The top-level functions and classes of a cell."
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [n for n in tree.body if isinstance(n, kinds)]


def is_patch(node: ast.AST) -> bool:
    "A function that fastcore's `@patch` adds to a class (a public method, not a module-level name)."
    return any(isinstance(d, ast.Name) and d.id == 'patch' for d in getattr(node, 'decorator_list', []))


def used_names(tree: ast.Module) -> set:
    "Names and attribute names a cell's code uses (what an import line binds does not count)."
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
    return out


def module_of(nb: Path) -> str | None:
    "The module a notebook exports to (`#| default_exp`)."
    for src in code_cells(nb):
        if m := re.search(r'#\|\s*default_exp\s+(\S+)', src):
            return m.group(1)
    return None


def public_names(module: str) -> list[str]:
    "What nbdev lists in the module's `__all__`."
    tree = ast.parse((root / PKG / f'{module}.py').read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, 'id', '') == '__all__' for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def mixes_imports(tree: ast.Module) -> bool:
    "Whether a lesson cell has top-level imports beside other code: nbdev's docs processing runs such a cell whole."
    kinds = [isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body]
    return any(kinds) and not all(kinds)


def notebook_report(nb: Path) -> dict:
    "One notebook's definitions per export cell, and its public names with and without a lesson."
    module = module_of(nb)
    crowded, callables, used, mixed = [], set(), set(), []
    for i, src in enumerate(code_cells(nb)):
        tree = parse(src)
        if is_export(src):
            defs = definitions(tree)
            if len(defs) > 1:
                crowded.append([d.name for d in defs])
            callables |= {d.name for d in defs if not d.name.startswith('_')}
            callables |= {d.name for d in defs if is_patch(d)}
        else:
            used |= used_names(tree)
            if mixes_imports(tree):
                mixed.append(i)
    names = public_names(module) if module else []
    names += sorted(n for n in callables if n not in names)
    missing = [n for n in names if n not in used]
    return dict(module=module, crowded=crowded, names=names, callables=callables, missing=missing, mixed=mixed)


def moved_tables() -> dict:
    "Each module's `_MOVED` table (name -> the module that defines it now), for the modules that have one."
    import importlib

    out = {}
    for p in sorted((root / PKG).glob('*.py')):
        if p.stem in ('_modidx', '__init__') or '_MOVED' not in p.read_text():
            continue
        out[p.stem] = dict(getattr(importlib.import_module(f'{PKG}.{p.stem}'), '_MOVED', {}))
    return out


def moved_errors(tables: dict) -> list[str]:
    "Moved names that do not resolve, that the old module still defines, or that the library imports from there."
    import importlib

    errs = []
    for old, table in tables.items():
        mod = importlib.import_module(f'{PKG}.{old}')
        for name, new in table.items():
            if name in vars(mod):
                errs.append(f'{PKG}.{old}: {name} is in _MOVED but still defined there')
            elif new == f'{PKG}.{old}' or not hasattr(importlib.import_module(new), name):
                errs.append(f'{PKG}.{old}._MOVED: {name} -> {new}, which does not define it')
    for p in sorted((root / PKG).glob('*.py')):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = (node.module or '').split('.')[-1] if node.level or (node.module or '').startswith(PKG) else ''
            for a in node.names:
                if a.name in tables.get(base, {}):
                    errs.append(
                        f'{p.relative_to(root)}:{node.lineno}: imports {a.name} from {base}; it lives in '
                        f'{tables[base][a.name]} now'
                    )
    return errs


def long_lines(path: Path) -> list[int]:
    "Line numbers over MAX_LINE characters, outside nbdev's generated `__all__`."
    out, in_all = [], False
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith('__all__ = '):
            in_all = True
        if len(line) > MAX_LINE and not in_all:
            out.append(i)
        if in_all and line.rstrip().endswith(']'):
            in_all = False
    return out


def _positional_count(arg: ast.AST) -> int:
    "How many arguments one item of a call's positional list passes: a starred literal's items, else 1 (0 for `*x`)."
    if isinstance(arg, ast.Starred):
        return len(arg.value.elts) if isinstance(arg.value, (ast.Tuple, ast.List)) else 0
    return 1


def positional_calls(path: Path, most: int = MAX_POSITIONAL) -> list[str]:
    """Calls in `path` that pass more than `most` arguments by position, as 'line: callee'.

    `*args` of a variable is not counted (its length is not known here); a starred literal (`*(a, b, c, d)`) counts its
    items, so starring a tuple is no way around the rule."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and ast.unparse(node.func) not in ALLOWED_POSITIONAL:
            n = sum(_positional_count(a) for a in node.args)
            if n > most:
                out.append(f'{node.lineno}: {ast.unparse(node.func)}({n} by position)')
    return out


def _parameter_count(node: ast.AST) -> int:
    "A function's parameters: positional, keyword-only, `*args` and `**kwargs` (one each), less a method's self/cls."
    a = node.args
    n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
    first = (a.posonlyargs + a.args)[:1]
    return n - (bool(first) and first[0].arg in ('self', 'cls'))


def long_definitions(path: Path) -> list[str]:
    """Functions of `path` over MAX_FUNCTION_LINES lines or MAX_PARAMETERS parameters, as 'name: what', unless allowed.

    Nested functions count by their own size (and inside their parent's)."""
    out = []

    def visit(node: ast.AST, prefix: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef) and f'{path.stem}.{name}' not in ALLOWED_LONG:
                    lines, params = child.end_lineno - child.lineno + 1, _parameter_count(child)
                    if lines > MAX_FUNCTION_LINES:
                        out.append(f'{name}: {lines} lines')
                    if params > MAX_PARAMETERS:
                        out.append(f'{name}: {params} parameters')
                visit(child, name + '.')
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(), str(path)), '')
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--notebooks', nargs='*', help='only these notebooks and their modules (default: all of them)')
    ap.add_argument('--min-share', type=float, default=MIN_SHARE, help='share of public names that need a lesson')
    a = ap.parse_args(argv)
    errs, g = [], graph()
    if c := find_cycle(g):
        errs.append('import cycle: ' + ' -> '.join(c))
    errs += moved_errors(tables := moved_tables())
    nbs = [Path(n).resolve() for n in a.notebooks] if a.notebooks else sorted((root / 'nbs').glob('[0-9]*.ipynb'))
    only = {module_of(nb) for nb in nbs} if a.notebooks else None
    for p in sorted((root / PKG).glob('*.py')):
        if p.stem == '_modidx' or (only is not None and p.stem not in only):
            continue
        if lines := long_lines(p):
            errs.append(f'{p.relative_to(root)}: lines over {MAX_LINE} characters: {lines[:10]}')
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES:
            errs.append(f'{p.relative_to(root)}: {n} lines, over {MAX_MODULE_LINES}: split it along its seams')
        if long := long_definitions(p):
            errs.append(
                f'{p.relative_to(root)}: functions over {MAX_FUNCTION_LINES} lines or {MAX_PARAMETERS} parameters '
                f'(read them as steps, or their parameters as one options object): {long}'
            )
        if calls := positional_calls(p):
            errs.append(f'{p.relative_to(root)}: calls with more than {MAX_POSITIONAL} arguments by position: {calls}')
    total = lessons = 0
    for nb in nbs:
        r = notebook_report(nb)
        for names in r['crowded']:
            errs.append(f'{nb.name}: an export cell defines {len(names)} things ({", ".join(names)}); one per cell')
        if r['mixed']:
            errs.append(
                f"{nb.name}: code cells {r['mixed']} mix imports with other code (the docs build runs them whole: "
                'put the imports in a cell of their own)'
            )
        if bare := [n for n in r['missing'] if n in r['callables']]:
            errs.append(f'{nb.name}: public functions or classes without a lesson in their notebook: {bare}')
        total += len(r['names'])
        lessons += len(r['names']) - len(r['missing'])
    share = lessons / total if total else 1.0
    if share < a.min_share:
        errs.append(
            f'{lessons} of {total} public names ({share:.0%}) are used in a lesson of their notebook; '
            f'at least {a.min_share:.0%} should be'
        )
    if errs:
        print('FAIL: ' + '\n'.join(errs), file=sys.stderr)
        return 1
    print(
        f'layout ok: {len(g)} modules, no import cycle; {len(nbs)} notebooks, one definition per export cell, '
        f'{lessons} of {total} public names ({share:.0%}) in a lesson; '
        f'{sum(map(len, tables.values()))} moved names resolve from their old modules; library lines <= {MAX_LINE}; '
        f'modules <= {MAX_MODULE_LINES} lines, functions <= {MAX_FUNCTION_LINES} lines and '
        f'{MAX_PARAMETERS} parameters; '
        f'no call with more than {MAX_POSITIONAL} arguments by position'
    )
    return 0


if __name__ == '__main__':
    sys.exit(main())
