"""The house's one-way dependencies (docs/architecture.md), checked on the source:
every import of every module, at module level and inside functions, parsed with `ast`."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# package -> the packages of ours it may import (itself always)
ALLOWED = {
    "rundir": set(),
    "refengine": set(),
    "playbooks": set(),
    "loadgen": {"rundir"},
    "probes": {"rundir"},
    "analyzers": {"rundir", "refengine", "playbooks"},
    "reports": {"rundir", "analyzers", "playbooks"},
    "llmbench": {"rundir", "refengine", "playbooks", "loadgen", "probes", "analyzers", "reports"},
}


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in ALLOWED:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = f
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The modules of ours that `name` imports (the longest known prefix of each imported name)."""
    is_pkg = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_pkg else name.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join(here + ([node.module] if node.module else []))
            # `from pkg import mod` imports the module; `from pkg import name` what pkg defines.
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
            targets = subs + ([base] if len(subs) < len(node.names) else [])
        for t in targets:
            parts = t.split(".")
            while parts and ".".join(parts) not in mods:
                parts.pop()
            if parts and ".".join(parts) != name:
                found.add(".".join(parts))
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, mods) for m, p in mods.items()}


def test_the_checker_sees_imports_inside_functions_and_relative_ones(tmp_path):
    mods = {"a": Path("a.py"), "a.b": Path("a/b.py"), "a.c": Path("a/c.py")}
    src = tmp_path / "x.py"
    src.write_text("def f():\n    from a.b import thing\n    from . import c\n", encoding="utf-8")
    assert _imports("a.x", src, mods) == {"a.b", "a.c"}


def test_dependencies_flow_one_way():
    upward = sorted(
        f"{m} imports {t}"
        for m, ts in _graph().items()
        for t in ts
        if t.split(".")[0] != m.split(".")[0] and t.split(".")[0] not in ALLOWED[m.split(".")[0]]
    )
    assert not upward, "imports against the one-way rule:\n" + "\n".join(upward)


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return circles


def test_no_import_circles():
    circles = _circles(_graph())
    assert not circles, "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


def _refengine_part(module: str) -> str:
    """The part of refengine a module belongs to: its folder (refengine.model for
    refengine.model.layers.linear), or the module itself for one at refengine's top level."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_no_folder_circles_inside_refengine():
    """refengine's parts are layers (docs/architecture.md, "refengine's layers"): a folder that
    imports another, at module level or inside a function, is never imported back by it, even
    through a third."""
    folders: dict[str, set[str]] = {}
    for m, ts in _graph().items():
        if m.split(".")[0] == "refengine":  # the package itself too: its __init__ imports the API
            here = _refengine_part(m)
            folders.setdefault(here, set()).update(
                _refengine_part(t) for t in ts if t.split(".")[0] == "refengine" and _refengine_part(t) != here
            )
    circles = _circles(folders)
    assert not circles, "folder circles inside refengine: " + "; ".join(" <-> ".join(c) for c in circles)


def test_the_folder_check_sees_a_circle_through_a_third_folder():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_private_names_imported_across_modules():
    mods = _modules()
    bad = []
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ALLOWED:
                bad += [
                    f"{name}: from {node.module} import {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)
