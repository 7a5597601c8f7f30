"""One name per thing (issue 40): a ``check_*`` function returns findings and a function that
raises instead is a ``require_*``, so a reader knows from the call which of the two it gets; and
a class name means one class in the package."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dflash_ckpt"

#: ``path:function`` -> why a raising function keeps a ``check_`` name (none now: add one only
#: with its reason).
RAISING_CHECKS_ALLOWED: dict[str, str] = {}
#: Class names two modules define, each a different thing (rename one when you touch it).
SHARED_CLASS_NAMES: dict[str, str] = {}


def _own_raises(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether ``fn``'s own body (not a nested function's) has a ``raise`` with an exception."""
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Raise) and node.exc is not None:
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))
    return False


def raising_checks(tree: ast.Module) -> list[str]:
    """The functions named ``check*`` or ``_check*`` in ``tree`` that raise."""
    return [n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name.lstrip("_").split("_")[0] == "check" and _own_raises(n)]


def test_the_name_scan_sees_a_raising_check() -> None:
    tree = ast.parse("def check_a():\n    raise ValueError\n"
                     "def _check_b(x):\n    if x:\n        raise KeyError(x)\n"
                     "def check_c():\n    def inner():\n        raise ValueError\n    return []\n"
                     "def checked():\n    raise ValueError\n"
                     "def require_d():\n    raise ValueError\n")
    assert raising_checks(tree) == ["check_a", "_check_b"]


def test_check_functions_return_findings_and_raisers_are_require() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        found += [f"{rel}:{name}" for name in raising_checks(ast.parse(path.read_text(encoding="utf-8")))]
    wrong = sorted(set(found) - set(RAISING_CHECKS_ALLOWED))
    assert not wrong, f"check_* functions that raise (name them require_*): {wrong}"
    stale = sorted(set(RAISING_CHECKS_ALLOWED) - set(found))
    assert not stale, f"RAISING_CHECKS_ALLOWED entries that no longer apply (remove them): {stale}"


def test_one_class_per_name() -> None:
    seen: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                seen.setdefault(node.name, []).append(path.relative_to(PACKAGE).as_posix())
    shared = {name: where for name, where in seen.items() if len(where) > 1}
    assert "Verdict" not in shared, f"two Verdict classes: {shared.get('Verdict')}"
    assert set(shared) <= set(SHARED_CLASS_NAMES), f"a class name defined twice: {shared}"
    assert set(SHARED_CLASS_NAMES) <= set(shared), "SHARED_CLASS_NAMES holds a name defined once: remove it"
