"""The folders of bench/ are layers, and imports run downward only.

The one layout listing is the block under "Layout" in docs/design.md: each folder of
``bench/`` is one line there, the layers listed from the top, and a folder may import
only the folders listed below it (``injectors/``, which imports nothing of ``bench``,
is below them all). Every static import counts, wherever it sits (a function body, a
``TYPE_CHECKING`` block): an import that only annotations use is still a dependency a
reader has to follow. Plug-ins named by ``module:attribute`` strings and imported by
the registries are the one deliberate exception: that is how a layer below finds the
plug-ins above it without naming them.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"


def layout() -> list[str]:
    """The layers of bench/ as docs/design.md lists them, top first (``bench.cli``...)."""
    text = DESIGN.read_text()
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    names = [m.group(1) for m in re.finditer(r"^  ([a-z_]+)(?:/|\.py)\s", block, re.M)]
    return [f"bench.{n}" for n in names]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """module -> the bench/injectors modules it imports (every import statement)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in [*ROOT.glob("bench/**/*.py"), *ROOT.glob("injectors/**/*.py")]:
        mod = module_name(path)
        package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                module = ".".join([*base, node.module] if node.module else base)
                # ``from bench.x import y`` may name a module y: count it when it is one.
                targets = [f"{module}.{a.name}" if _is_module(f"{module}.{a.name}") else module for a in node.names]
            else:
                continue
            graph[mod].update(t for t in targets if t.split(".")[0] in ("bench", "injectors"))
    return graph


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def layer_of(module: str, layers: list[str]) -> int | None:
    """Index of the layer holding ``module`` (0 is the top); None for the bench package
    itself (its version, importable from anywhere) and for injectors (below all)."""
    for i, layer in enumerate(layers):
        if module == layer or module.startswith(layer + "."):
            return i
    return None


def test_every_folder_of_bench_is_in_the_layout_and_nothing_else() -> None:
    listed = layout()
    folders = {f"bench.{p.name}" for p in (ROOT / "bench").iterdir() if (p / "__init__.py").is_file()}
    assert folders - set(listed) == set(), f"folders of bench/ missing from the layout in {DESIGN.name}"
    assert {n for n in listed if not _is_module(n)} == set(), f"the layout in {DESIGN.name} lists what does not exist"
    assert len(listed) == len(set(listed)), "a layer is listed twice"


def test_imports_run_downward_only() -> None:
    layers = layout()
    upward = []
    for src, targets in imports().items():
        for dst in targets:
            if src.startswith("injectors"):
                if dst.startswith("bench"):
                    upward.append(f"{src} -> {dst} (injectors import nothing of bench)")
                continue
            a, b = layer_of(src, layers), layer_of(dst, layers)
            if a is None and src != "bench":
                upward.append(f"{src} is in no layer of the layout")
            elif b is not None and a is not None and b < a:
                upward.append(f"{src} -> {dst} ({layers[a]} is below {layers[b]})")
            elif src == "bench" and dst != "bench":
                upward.append(f"{src} -> {dst} (the package itself imports nothing)")
    assert upward == [], "upward imports:\n  " + "\n  ".join(sorted(upward))


def test_no_import_cycles() -> None:
    graph = imports()
    cycles = _cycles(graph)
    assert cycles == [], "import cycles:\n  " + "\n  ".join(" -> ".join(c) for c in cycles)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w == v:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found
