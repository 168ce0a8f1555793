"""No import cycle inside walfs/: the import graph of every module (every import: at the top,
inside functions, under TYPE_CHECKING; relative ones resolved; `from pkg import mod` counted as
an import of the module when it is one) has no cycle. A cycle is printed whole, module by
module, so that the one import to move is plain to see."""

from __future__ import annotations

import ast
import pathlib

REPO = pathlib.Path(__file__).resolve().parent.parent
WALFS = REPO / "walfs"


def module_name(path: pathlib.Path, root: pathlib.Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: pathlib.Path = REPO, package: str = "walfs") -> dict[str, pathlib.Path]:
    return {module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}


def extensions(root: pathlib.Path = REPO, package: str = "walfs") -> set[str]:
    """Compiled modules (walfs._core): leaves of the graph, imported by their own name."""
    found = (root / package).rglob("*.so")
    return {".".join([*p.parent.relative_to(root).parts, p.name.split(".")[0]]) for p in found}


def imports_of(name: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """The modules of `known` that `name` imports, anywhere in its file."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()

    def add(target: str) -> None:
        # The module itself if it is one, else the nearest package that holds it
        # (`import walfs.x.y` runs walfs/x/__init__.py too, but that is not an edge
        # of this module's own making: only the deepest known module counts).
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            for a in node.names:
                if f"{mod}.{a.name}" in known:  # `from pkg import mod`: the module
                    add(f"{mod}.{a.name}")
                else:
                    add(mod)
    return out


def graph(root: pathlib.Path = REPO, package: str = "walfs") -> dict[str, set[str]]:
    mods = modules(root, package)
    known = set(mods) | extensions(root, package)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


# Edges allowed to close a cycle while a change is under way (none today). Each must still
# exist (else delete it here): an allowance never outlives its reason.
LEAVING: set[tuple[str, str]] = set()


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (or a module that
    imports itself), each as one cycle through it (Tarjan, then a path back)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in g.get(v, ()):
                comps.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return [_one_cycle(g, comp) for comp in comps]


def _one_cycle(g: dict[str, set[str]], comp: list[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside it."""
    members = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(g[v] & members):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, v, start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return [start, start]


def test_walfs_has_no_import_cycle() -> None:
    g = graph()
    stale = sorted(e for e in LEAVING if e[1] not in g.get(e[0], set()))
    assert stale == [], f"these edges are gone: delete them from LEAVING: {stale}"
    for a, b in LEAVING:
        g[a].discard(b)
    found = cycles(g)
    text = "\n".join(" -> ".join(c) + f"   ({len(c) - 1} modules)" for c in found)
    assert found == [], "import cycles in walfs/ (move the shared names where they belong):\n" + text


def test_the_graph_sees_every_kind_of_import(tmp_path: pathlib.Path) -> None:
    """The scanner itself: late, TYPE_CHECKING, relative and `from pkg import mod` imports
    are edges, and a cycle through them is found and printed from end to end."""
    pkg = tmp_path / "walfs"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from walfs.sub import b\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import c\n"
    )
    (pkg / "sub" / "c.py").write_text("from ..a import f\nimport os\n")
    (pkg / "d.py").write_text("import walfs.sub.c\n")
    g = graph(tmp_path, "walfs")
    assert g["walfs.a"] == {"walfs.sub.b"}
    assert g["walfs.sub.b"] == {"walfs.sub.c"}
    assert g["walfs.sub.c"] == {"walfs.a"}
    assert g["walfs.d"] == {"walfs.sub.c"}
    assert cycles(g) == [["walfs.a", "walfs.sub.b", "walfs.sub.c", "walfs.a"]]
    (pkg / "sub" / "c.py").write_text("import os\n")
    assert cycles(graph(tmp_path, "walfs")) == []
