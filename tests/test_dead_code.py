"""No dead code ships: every function, class, method, class field (``name: type``) and
module-level constant the package defines is reached from the package itself, not only from
tests/ (issue 40).

The scan is a mark and sweep over names. A definition's body references the names it loads (less
a function's own locals), the attributes it reads, and the strings that spell a name or a path
(``"pkg.mod:attr"``, a ``getattr`` name, a ``globals()[name]`` key); docstrings and ``__all__``
lists are not references, nor is a keyword argument (a field only ever set is unread).
The roots are what runs on import (module-level statements that define nothing), what a
decorator registers, every dunder method of a reached class, the console scripts in pyproject,
and the public API (``dflash_ckpt.__all__``, ``dflash_ckpt.api.__all__``). A name reached from a
root is alive, with every definition of that name (names, not bindings: a method ``run`` lives
when any ``.run`` is read), so the scan errs towards "alive"; what it flags is really unread.
Code only tests need belongs in tests/ or the tests should use what the package uses.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dflash_ckpt"

#: Modules whose ``__all__`` is the public API (every name in it is a root).
PUBLIC = ("dflash_ckpt/__init__.py", "dflash_ckpt/api.py")
#: Decorators that do not register the function anywhere (a decorated function is otherwise a root).
PLAIN_DECORATORS = {"property", "staticmethod", "classmethod", "cached_property", "lru_cache", "cache",
                    "dataclass", "no_grad", "inference_mode", "wraps", "setter", "overload", "contextmanager",
                    "abstractmethod", "total_ordering", "runtime_checkable", "final"}
#: A string that is a name, a dotted path or ``module:attribute``: each part is a reference.
NAMEISH = re.compile(r"[A-Za-z_][\w.]*(:[A-Za-z_][\w.]*)?")

#: ``module:name`` -> why it stays though nothing in the package reads it. Keep this short.
ALLOWED: dict[str, str] = {
    "dflash_ckpt.neutral:CommandSafeFile.writable": "the text-stream protocol: rich and click ask it of the console's file",
    "dflash_ckpt.neutral:CommandSafeFile.encoding": "the text-stream protocol: rich and click ask it of the console's file",
    "dflash_ckpt.run.smoke_result:SmokeResult.engine_runs":
        "the engine's own runs for API callers; benchmarks/bench_engines.py times them",
    # Transitional, in files other branches of issue 40 rewrite (remove each once merged):
    "dflash_ckpt.commands.options:RUN_PANELS": "i40-opts rewrites the command options (the help panels' table)",
}


@dataclass
class Definition:
    module: str
    name: str  # ``name``, or ``Class.name`` for a method or a field
    line: int
    refs: set[str] = field(default_factory=set)
    root: bool = False
    #: False for an import's alias (``from m import a as b``: reading ``b`` reads ``a``)
    reported: bool = True

    @property
    def where(self) -> str:
        return f"{self.module}:{self.name}"


def _is_docstring(node: ast.AST, parent: ast.AST | None) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            and isinstance(parent, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and parent.body and parent.body[0] is node)


def _refs(node: ast.AST) -> tuple[set[str], set[str], set[str]]:
    """One walk of ``node``: the names it loads, the attributes and name-like strings it reads,
    and the names it binds (arguments, assignments, loop and ``except`` targets) that it does
    not declare ``global``."""
    names: set[str] = set()
    other: set[str] = set()
    bound: set[str] = set()
    declared: set[str] = set()
    stack: list[tuple[ast.AST, ast.AST | None]] = [(node, None)]
    while stack:
        cur, parent = stack.pop()
        if _is_docstring(cur, parent):
            continue
        if isinstance(cur, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in cur.targets):
            continue
        if isinstance(cur, ast.Name):
            (bound if isinstance(cur.ctx, ast.Store) else names).add(cur.id)
        elif isinstance(cur, ast.Attribute) and not isinstance(cur.ctx, ast.Store):
            other.add(cur.attr)
        elif isinstance(cur, ast.Constant) and isinstance(cur.value, str) and NAMEISH.fullmatch(cur.value):
            other.update(p for p in re.split(r"[.:]", cur.value) if p)
        elif isinstance(cur, ast.arg):
            bound.add(cur.arg)
        elif isinstance(cur, ast.ExceptHandler) and cur.name:
            bound.add(cur.name)
        elif isinstance(cur, (ast.Global, ast.Nonlocal)):
            declared.update(cur.names)
        stack.extend((child, cur) for child in ast.iter_child_nodes(cur))
    return names, other, bound - declared


def references(node: ast.AST) -> set[str]:
    """The names ``node`` loads, the attributes it reads, and the name-like strings it holds."""
    names, other, _ = _refs(node)
    return names | other


def function_refs(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """``references(fn)`` less the names ``fn`` binds itself (in nested scopes too): a local
    ``dotted`` is no read of a module's ``dotted``."""
    names, other, bound = _refs(fn)
    return other | (names - bound)


def _registers(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> bool:
    """Whether a decorator may register ``fn`` (anything but the plain ones)."""
    for dec in fn.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name not in PLAIN_DECORATORS:
            return True
    return False


def _module_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """A module's statements, with those under a module-level ``if``/``try`` lifted (the
    ``TYPE_CHECKING`` imports, an optional import's fallback)."""
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, ast.If):
            out += _module_level(stmt.body) + _module_level(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            out += _module_level(stmt.body) + _module_level([s for h in stmt.handlers for s in h.body])
            out += _module_level(stmt.orelse) + _module_level(stmt.finalbody)
        else:
            out.append(stmt)
    return out


def scan_module(module: str, tree: ast.Module) -> tuple[list[Definition], set[str]]:
    """``module``'s definitions, and the names its root statements reference."""
    defs: list[Definition] = []
    roots: set[str] = set()
    for stmt in _module_level(tree.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            dunder = stmt.name.startswith("__") and stmt.name.endswith("__")  # a module's __getattr__, __dir__
            refs = set() if isinstance(stmt, ast.ClassDef) else function_refs(stmt)  # a class's: below
            d = Definition(module, stmt.name, stmt.lineno, refs, root=dunder or _registers(stmt))
            defs.append(d)
            if isinstance(stmt, ast.ClassDef):
                # the class itself references its bases, decorators, class-level statements and
                # dunder methods (run through the class); each other method is its own definition,
                # reached when its name is read anywhere
                body = [s for s in stmt.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.AnnAssign))]
                dunders = [m for m in stmt.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                           and m.name.startswith("__") and m.name.endswith("__")]
                # a field (``name: type``, a dataclass's or a NamedTuple's) lives when it is read
                # (all of them when the class writes itself out whole: ``asdict(self)``, ``self.__dict__``)
                whole = bool(references(stmt) & {"__dict__", "asdict", "astuple"})
                defs += [Definition(module, f"{stmt.name}.{f.target.id}", f.lineno,
                                    references(f.value) if f.value else set(), root=whole)
                         for f in stmt.body if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name)]
                d.refs = references(ast.Module(body=body, type_ignores=[]))
                d.refs |= {r for m in dunders for r in function_refs(m)}
                d.refs |= {r for x in (*stmt.decorator_list, *stmt.bases, *stmt.keywords) for r in references(x)}
                d.refs |= {r for f in stmt.body if isinstance(f, ast.AnnAssign) for r in references(f.annotation)}
                defs += [Definition(module, f"{stmt.name}.{m.name}", m.lineno, function_refs(m), root=_registers(m))
                         for m in stmt.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                         and not (m.name.startswith("__") and m.name.endswith("__"))]
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            value_refs = references(stmt.value) if stmt.value is not None else set()
            if any(n == "__all__" for n in names) or not names:
                if "__all__" in names and module.replace(".", "/") + ".py" in PUBLIC or \
                        "__all__" in names and module.replace(".", "/") + "/__init__.py" in PUBLIC:
                    roots |= {e.value for e in getattr(stmt.value, "elts", []) if isinstance(e, ast.Constant)}
                elif not names:
                    roots |= value_refs | {r for t in targets for r in references(t)}
                continue
            for n in names:
                dunder = n.startswith("__") and n.endswith("__")
                defs.append(Definition(module, n, stmt.lineno, set(value_refs), root=dunder))
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            defs += [Definition(module, a.asname, stmt.lineno, {a.name.rsplit(".", 1)[-1]}, reported=False)
                     for a in stmt.names if a.asname]
        else:
            roots |= references(stmt)
    return defs, roots


def entry_points() -> set[str]:
    """The attributes pyproject's console scripts name (``pkg.mod:attr``)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    return {m.group(1) for m in re.finditer(r'=\s*"[\w.]+:(\w+)"', block)}


def dead_definitions(sources: dict[str, str], extra_roots: set[str] = frozenset()) -> list[Definition]:
    """Every definition in ``sources`` (module name -> its text) that no root reaches."""
    defs: list[Definition] = []
    live: set[str] = set(extra_roots)
    for module, text in sources.items():
        found, roots = scan_module(module, ast.parse(text))
        defs += found
        live |= roots
    by_name: dict[str, list[Definition]] = {}
    for d in defs:
        by_name.setdefault(d.name.rsplit(".", 1)[-1], []).append(d)
    todo = [d for d in defs if d.root]
    todo += [d for n in live for d in by_name.get(n, [])]
    reached: set[int] = set()
    while todo:
        d = todo.pop()
        if id(d) in reached:
            continue
        reached.add(id(d))
        for name in d.refs:
            todo += [x for x in by_name.get(name, []) if id(x) not in reached and x is not d]
    return sorted((d for d in defs if id(d) not in reached and d.reported), key=lambda d: (d.module, d.line))


def package_sources() -> dict[str, str]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        out[".".join(parts)] = path.read_text(encoding="utf-8")
    return out


def test_the_scan_finds_planted_dead_code() -> None:
    """A function only itself calls, a method nobody reads, a constant read only by a dead
    function, one unused class, and a function only a same-named local "reads" are flagged; what a root reaches is not."""
    src = '''
import typer
app = typer.Typer()
LIMIT = 3
ONLY_DEAD_READS = 4
__all__ = ["looks_public"]

def looks_public(): return LIMIT

def recursive(n): return recursive(n - 1) if n else ONLY_DEAD_READS

class Used:
    def __init__(self): self.x = 1
    def read(self): return "x"
    def never(self): return 2

class Unused:
    pass

@app.command()
def registered(): return Used().read()

TABLE = {"go": "pkg.mod:by_string"}
def by_string(): return 1
print(TABLE)

def shadowed(): return 1
def uses_a_local():
    shadowed = 2
    return shadowed
uses_a_local()
'''
    dead = {d.name for d in dead_definitions({"pkg.mod": src})}
    assert dead == {"ONLY_DEAD_READS", "recursive", "Used.never", "Unused", "looks_public", "LIMIT", "shadowed"}


@functools.lru_cache(maxsize=1)
def package_dead() -> tuple[Definition, ...]:
    """The package's dead definitions, scanned once for the tests below."""
    sources = package_sources()
    assert len(sources) > 100, "the package was not found"
    return tuple(dead_definitions(sources, entry_points()))


def test_nothing_in_the_package_is_dead() -> None:
    dead = [d for d in package_dead() if d.where not in ALLOWED]
    lines = [f"{d.module.replace('.', '/')}.py:{d.line}: {d.name}" for d in dead]
    assert not lines, ("defined but never read by the package (delete it, move what only tests "
                       "need into tests/, or add it to ALLOWED with the reason):\n" + "\n".join(lines))


def test_the_allow_list_holds_only_what_exists() -> None:
    """An entry for a name that is gone (or no longer dead) is removed, so the list stays short."""
    dead = {d.where for d in package_dead()}
    assert set(ALLOWED) <= dead, f"ALLOWED entries that are not dead code: {sorted(set(ALLOWED) - dead)}"


def unused_imports(text: str) -> list[str]:
    """Names a module imports and never uses (a package's ``__init__`` re-exports, and a line
    marked ``noqa: F401`` says why it imports for its side effect or for others)."""
    tree = ast.parse(text)
    lines = text.splitlines()
    imported: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and getattr(node, "module", None) != "__future__":
            if "noqa: F401" in lines[node.lineno - 1]:
                continue
            for alias in node.names:
                imported[(alias.asname or alias.name).split(".")[0]] = node.lineno
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    quoted = " ".join(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str))
    return [f"{name} (line {line})" for name, line in imported.items()
            if name not in used and not re.search(rf"\b{re.escape(name)}\b", quoted)]


def test_unused_imports_are_found() -> None:
    text = "from __future__ import annotations\nimport os, sys\nfrom typing import Any\nx: Any = sys.argv\n"
    assert unused_imports(text) == ["os (line 2)"]


def test_no_module_imports_what_it_does_not_use() -> None:
    found = [f"{path.relative_to(ROOT)}: {name}" for path in sorted(PACKAGE.rglob("*.py")) if path.name != "__init__.py"
             for name in unused_imports(path.read_text(encoding="utf-8"))]
    assert not found, f"unused imports: {found}"


if __name__ == "__main__":
    for d in dead_definitions(package_sources(), entry_points()):
        print(f"{d.module.replace('.', '/')}.py:{d.line}: {d.name}", file=sys.stdout)
