"""The stack the README draws is true by construction: read from the import
graph of ``crawler/``, every import counted (module level, inside functions,
under ``TYPE_CHECKING``)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.servers import ROOT

PACKAGE = ROOT / "crawler"

#: layers from the top; a module imports only its own layer and those below
LAYERS = (
    ("crawler.commands", "crawler.addon"),
    ("crawler.spiders",),
    ("crawler.middlewares", "crawler.extensions"),
    ("crawler.scheduler",),
    ("crawler.worker",),
    ("crawler.store",),
)
COMPONENTS = ("crawler.middlewares", "crawler.extensions", "crawler.spiders")


def _name(path: Path, top: Path) -> str:
    parts = list(path.relative_to(top).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """``{module: modules it imports}`` within the package."""
    modules = {_name(p, root.parent): p for p in root.rglob("*.py")}

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    edges: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(filter(None, (resolve(a.name) for a in node.names)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    target = resolve(full) if full in modules else resolve(base)
                    if target:
                        found.add(target)
        edges[module] = found - {module}
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def rank(module: str) -> int | None:
    """The layer of ``module`` (0 the top), None for the shared base
    (settings, clock, identity, connection, robots, fetch, ...)."""
    for depth, prefixes in enumerate(LAYERS):
        if any(_within(module, p) for p in prefixes):
            return depth
    return None


def test_no_circle_counting_every_import() -> None:
    edges = graph()
    assert len(edges) > 50  # the graph was read
    assert circles(edges) == []


def test_no_upward_import() -> None:
    """A layer imports its own and lower layers; the base (and ``fetch``, a
    leaf beside the engine) imports no layer."""
    upward = []
    for module, targets in graph().items():
        mine = rank(module)
        for target in targets:
            theirs = rank(target)
            if theirs is None:
                continue
            if mine is None or theirs < mine:
                upward.append(f"{module} -> {target}")
    assert upward == []


def test_components_import_only_the_session() -> None:
    """Middlewares, extensions and spiders reach the frontier through
    ``crawler.worker`` alone: not the store, not the scheduler adapter, not
    the session's private modules."""
    stray = [f"{m} -> {t}" for m, targets in graph().items() if any(_within(m, c) for c in COMPONENTS)
             for t in targets if rank(t) is not None and rank(t) >= 3 and t != "crawler.worker"]
    assert stray == []


def test_no_private_module_imported_from_outside_its_package() -> None:
    stray = []
    for module, targets in graph().items():
        for target in targets:
            owner, _, last = target.rpartition(".")
            if last.startswith("_") and not last.startswith("__") and not _within(module, owner):
                stray.append(f"{module} -> {target}")
    assert stray == []


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """The reader finds a circle, an upward edge and a private import in a
    package made to have them (so the tests above can fail)."""
    pkg = tmp_path / "crawler"
    (pkg / "store").mkdir(parents=True)
    (pkg / "worker").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "store" / "__init__.py").write_text("from crawler.worker import x\n")
    (pkg / "worker" / "__init__.py").write_text("from crawler.store import z\n\n\ndef f():\n    from crawler.store import _y\n")
    (pkg / "store" / "_y.py").write_text("")
    edges = graph(pkg)
    assert circles(edges) == [["crawler.store", "crawler.worker"]]
    assert rank("crawler.store") > rank("crawler.worker")  # store -> worker is upward
    assert "crawler.store._y" in edges["crawler.worker"]
