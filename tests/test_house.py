"""The package's shape: no import circle between its files, none between its packages (each
module counted as its package: ``dflash_ckpt.checks``, ``dflash_ckpt.runtime``, a top-level module
as itself), and every script a user or a test runs (fixtures/, benchmarks/) imports against the current package (a moved name fails here, not
when someone next regenerates a fixture)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from script_imports import import_script

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dflash_ckpt"
#: Circles another branch removes (issue 18 moves ``DeadlineExceeded`` into the errors module);
#: delete the entry once that is merged, so the test guards it too.
KNOWN_CIRCLES: set[frozenset[str]] = set()


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every package module ``path`` imports, wherever the import sits (module level, under
    ``TYPE_CHECKING``, or inside a function): each is an arrow between two files."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in known:
                    out.add(full)
                elif base in known:
                    out.add(base)
    out.discard(name)
    return out


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.add(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(comp)
    return found


def test_circles_finder_finds_a_planted_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [{"a", "b", "c"}]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_between_package_files() -> None:
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    assert graph["dflash_ckpt.run.smoke"], "the import reader found no imports: it is broken"
    found = [sorted(c) for c in circles(graph) if frozenset(c) not in KNOWN_CIRCLES]
    assert found == [], f"import circles (break each by moving the shared piece down a layer): {found}"


def package_of(name: str) -> str:
    """``dflash_ckpt.inspection`` -> ``dflash_ckpt.checks``; ``dflash_ckpt.runtime.quant.fp8``
    -> ``dflash_ckpt.runtime``; a top-level module (``dflash_ckpt.errors``) is its own package."""
    return ".".join(name.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph with each module collapsed to its package (arrows inside one package dropped)."""
    out: dict[str, set[str]] = {}
    for name, deps in graph.items():
        out.setdefault(package_of(name), set()).update(package_of(d) for d in deps)
    for name, deps in out.items():
        deps.discard(name)
    return out


def test_package_graph_finds_a_circle_no_file_circle_shows() -> None:
    """Two packages that import each other through different files: no file circle, one package circle."""
    graph = {"p.a.x": {"p.b.y"}, "p.b.y": set(), "p.b.z": {"p.a.w"}, "p.a.w": set(), "p.c": {"p.a.x"}}
    assert circles(graph) == []
    assert circles(package_graph(graph)) == [{"p.a", "p.b"}]
    assert circles(package_graph({"p.a.x": {"p.b.y"}, "p.b.y": {"p.c"}, "p.c": set()})) == []


def test_no_import_circle_between_packages() -> None:
    """Data flows sources -> draftspec -> checks -> commands; canonical (normalize's planning and
    writing) sits beside checks, the runtime below the commands, the statistics (stats) below
    checks, run, runtime and the engine runners. A circle between two packages
    means one of them holds a piece of the other's layer: move it down (the message names the
    file arrows that close each circle)."""
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    packages = package_graph(graph)
    assert "dflash_ckpt.checks" in packages["dflash_ckpt.commands"], "the package graph is broken"
    found = []
    for circle in circles(packages):
        arrows = sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps
                        if package_of(a) in circle and package_of(b) in circle and package_of(a) != package_of(b))
        found.append((sorted(circle), arrows))
    assert found == [], f"import circles between packages (move the shared piece down a layer): {found}"


def test_the_statistics_sit_below_every_package_that_reads_them() -> None:
    """``stats`` (what a measured acceptance says) imports no other package of dflash_ckpt, and
    checks, run, runtime and the engine runners read it: torch-free statistics in their own
    package, not inside the runtime that ``checks`` must not reach into."""
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    packages = package_graph(graph)
    assert packages["dflash_ckpt.stats"] == set(), packages["dflash_ckpt.stats"]
    readers = {p for p, deps in packages.items() if "dflash_ckpt.stats" in deps}
    assert {"dflash_ckpt.checks", "dflash_ckpt.run", "dflash_ckpt.runtime", "dflash_ckpt.engine_runners"} <= readers, readers
    for below in ("dflash_ckpt.checks", "dflash_ckpt.draftspec", "dflash_ckpt.sources", "dflash_ckpt.stats"):
        assert "dflash_ckpt.runtime" not in packages[below], f"{below} reaches into the runtime (torch)"
    torch_free = [name for name in known if name.startswith("dflash_ckpt.stats")]
    for name in torch_free:
        tops = [n for n in ast.parse(known[name].read_text(encoding="utf-8")).body
                if isinstance(n, (ast.Import, ast.ImportFrom))]
        assert not any("torch" in ast.unparse(n) for n in tops), f"{name} imports torch at its top"


SCRIPTS = sorted(p for folder in ("fixtures", "benchmarks") for p in (ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_fixture_and_benchmark_script_imports(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Imported as a module (``__name__`` is not ``__main__``, so no ``main`` runs), with the
    script's folder and ``fixtures/`` on the path as when it is run; skipped, naming the extra,
    where the script needs an optional extra that is not installed (tests/script_imports.py)."""
    monkeypatch.syspath_prepend(str(ROOT / "fixtures"))
    monkeypatch.syspath_prepend(str(script.parent))
    import_script(script)


# -- one typed pair: the specs decode the configs ---------------------------------------------------

#: Modules outside draftspec/ that hold a raw config dict, each with why (the shortest list).
RAW_CONFIG_READERS = {
    "canonical/plan.py": "normalize's editor: it rewrites config.json key by key (DraftSpec.document in, the "
                         "edited document out), so the raw document is what it works on",
    "checks/hub_code.py": "DF321's scan of a target document for Hub code keys at any depth (auto_map, a kernel "
                          "repo), handed the raw dict by checks/target_config.py before transformers sees it",
    "checks/target_config.py": "the run's validator of the raw target config: each DF142 line names the key at the "
                               "level it is written (text_config.hidden_size), so it reads both levels",
    "runtime/hf_config.py": "transformers' input: every key of the dict, at every level, is judged against "
                            "transformers' config classes before they see it",
    "runtime/hf_target.py": "transformers' input: the raw dict is what transformers builds its config from "
                            "(and model.config is transformers' object, not ours)",
}


def _draftspec_names(tree: ast.Module) -> set[str]:
    """Names a module imports from ``dflash_ckpt.draftspec``: the decoders a raw dict may be handed to."""
    return {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
            and (n.module or "").startswith("dflash_ckpt.draftspec") for a in n.names}


def raw_config_reads(source: str) -> list[str]:
    """Where ``source`` reads a raw config: ``text_config`` subscripted or fetched with ``.get``
    from anything; a ``decoder_config`` call; anything's ``.config``/``.decoder`` (a draft's or a
    target's spec, a builder's document) subscripted, fetched with ``.get``, tested with ``in``,
    taken into a name, or handed to any function but a draftspec/ decoder imported by name; a
    function that takes a ``config``/``cfg`` parameter (how a dict handed over arrives)."""
    tree = ast.parse(source)
    decoders = _draftspec_names(tree)
    to_decoder = {id(a) for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                  and n.func.id in decoders for a in [*n.args, *(k.value for k in n.keywords)]}

    def spec_config(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr in ("config", "decoder")

    def text_key(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value == "text_config"

    found = []
    for node in ast.walk(tree):
        read = (
            (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
             and any(a.arg in ("config", "cfg") for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]))
            or
            (isinstance(node, ast.Subscript) and (spec_config(node.value) or text_key(node.slice)))
            or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and (spec_config(node.func.value) or bool(node.args) and text_key(node.args[0])))
            or (isinstance(node, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in node.ops)
                and any(spec_config(c) for c in node.comparators))
            or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "decoder_config")
            or (spec_config(node) and isinstance(node.ctx, ast.Load) and id(node) not in to_decoder)
        )
        if read and not any(f.startswith(f"{node.lineno}:") for f in found):
            found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return sorted(found, key=lambda f: int(f.split(":")[0]))


def test_the_raw_config_scan_finds_planted_reads() -> None:
    planted = ("a = pre.target.config.get('max_position_embeddings')\n"
               "b = cfg['text_config']\n"
               "c = decoder_config(x)\n"
               "d = 'tie' in tspec.config\n"
               "config, where = spec.config, spec.where\n"
               "e = spec.config.get('layer_types')\n"
               "f = rope_differs(spec.config)\n"
               "g = r.spec.decoder['hidden_size']\n"
               "def h(where: str, *, cfg: dict) -> None: ...\n")
    assert [line.split(":")[0] for line in raw_config_reads(planted)] == ["1", "2", "3", "4", "5", "6", "7", "8", "9"]
    decoded = ("from dflash_ckpt.draftspec.families import hf_family_of\n"
               "x = spec.dims.head_dim\ny = target.max_position_embeddings\nz = spec.top('layer_types')\n"
               "w = hf_family_of(spec.config)\n")
    assert raw_config_reads(decoded) == []


def test_no_module_outside_draftspec_reads_a_raw_config() -> None:
    """The specs decode their configs once (draftspec/, from the files sources/ reads): every
    package above them takes the pair or its typed parts (a draft's keys as its file writes them
    through ``DraftSpec.top``/``declared``), never the dict (RAW_CONFIG_READERS: why not)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in ("draftspec", "sources") or rel.as_posix() in RAW_CONFIG_READERS:
            continue
        if reads := raw_config_reads(path.read_text(encoding="utf-8")):
            found[rel.as_posix()] = reads
    assert found == {}, f"raw config reads outside draftspec/ (decode it on the spec instead): {found}"
    for rel in RAW_CONFIG_READERS:  # an entry that no longer reads one goes
        assert raw_config_reads((PACKAGE / rel).read_text(encoding="utf-8")), rel


def test_run_smoke_run_and_run_probe_are_short_compositions() -> None:
    """Each command's run reads as its steps: the opening, the planning and the measuring live in
    functions of their own (run/pair.py, runtime/plan.py), so each stays under 50 lines."""
    for rel, name in (("run/smoke.py", "run_smoke_run"), ("run/probe.py", "run_probe")):
        tree = ast.parse((PACKAGE / rel).read_text(encoding="utf-8"))
        func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
        assert func.end_lineno - func.lineno + 1 < 50, f"{rel}:{name} is {func.end_lineno - func.lineno + 1} lines"


def test_capacity_block_size_and_head_dim_are_worked_out_once() -> None:
    """The cache capacity and the block size are the plan's (runtime/plan.Blocks), the head size
    the specs' (draftspec/decoder_dims.default_head_dim): nowhere else adds ``+ max_new_tokens +`` a
    block to size a cache, nor divides ``hidden_size`` by the heads."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        text = path.read_text(encoding="utf-8")
        if rel != "runtime/plan.py" and ".new_cache(max(" in text:
            found.append(f"{rel}: a cache sized by hand")
        if rel != "draftspec/decoder_dims.py" and re.search(r"//\s*[\w.]*heads\b", text):
            found.append(f"{rel}: a head size derived by hand")
        if rel != "runtime/plan.py" and "opts.block_size if opts.block_size is not None" in text:
            found.append(f"{rel}: the block size chosen by hand")
    assert found == []
