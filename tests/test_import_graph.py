"""No import circles in llmpar, counting the imports inside functions (issue 24 §1: a circle hidden
behind a function-level import is still a circle; docs/architecture.md, floors).

Every ``import llmpar.x`` and ``from llmpar.x import y`` in src/llmpar, at any depth of the file,
is an edge x -> the module it names (``from llmpar.x import y`` -> llmpar.x.y when y is a
module). The package's own ``__init__`` is left out: its ``__getattr__`` is the API's lazy facade
(``llmpar.memory`` resolves llmpar.api on first use), not a dependency of the modules that import
a submodule through it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "llmpar"


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(("llmpar",) + parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for name, path in mods.items():
        if name == "llmpar":
            edges[name] = set()
            continue
        found: set[str] = set()
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("llmpar"))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                if not base.startswith("llmpar"):
                    continue
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                found.update(subs)
                if len(subs) < len(node.names):
                    found.add(base)
        edges[name] = {m for m in found if m in mods and m != name}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_finder_sees_a_circle():
    # the check can fail: two modules that import each other, one of them inside a function
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_circles_counting_function_level_imports():
    mods = _modules()
    assert "llmpar.cost.step" in mods and "llmpar.parallel" in mods
    cycles = _cycles(_edges(mods))
    assert cycles == [], f"import circles: {cycles}"


# The floors of the house, lowest first (docs/architecture.md, The house): a module may import its
# own floor and the ones below, never one above. The package facade (`llmpar`) is not a floor.
FLOORS = (
    ("errors", "units"),
    ("specs",),
    ("parallel",),
    ("layout", "layout_settings", "options"),
    ("cost",),
    ("evidence", "inputs", "remedies", "outputs", "step_trace", "results", "results_plan"),
    ("planner", "calibrate", "validation", "serving", "launch", "run"),
    ("api",),
    ("cli", "__main__"),
)


def floor_of(module: str) -> int | None:
    if module == "llmpar":
        return None
    if module.endswith(".__main__"):      # `python -m llmpar.x`: an entry point, the CLI's floor
        return len(FLOORS) - 1
    top = module.split(".")[1]
    return next((i for i, names in enumerate(FLOORS) if top in names), None)


def test_every_module_has_a_floor_and_no_import_points_up():
    mods = _modules()
    unfloored = sorted(m for m in mods if m != "llmpar" and floor_of(m) is None)
    assert unfloored == [], f"modules outside every floor (add them to FLOORS and docs/architecture.md): {unfloored}"
    up = sorted((a, b) for a, targets in _edges(mods).items() for b in targets
                if floor_of(a) is not None and floor_of(b) is not None and floor_of(b) > floor_of(a))
    assert up == [], f"imports that point up a floor: {up}"


def test_the_floor_check_can_fail():
    assert floor_of("llmpar.specs.hardware") < floor_of("llmpar.cost.collectives")
    assert floor_of("llmpar.validation.__main__") == floor_of("llmpar.cli.main")


def test_every_module_is_in_the_rooms_list():
    # docs/architecture.md, "The rooms": a newcomer finds a formula by opening its room, so every
    # module of src/llmpar is listed there (a package's __init__ and __main__ excepted)
    doc = (SRC.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    rooms = doc[doc.index("## The rooms"):doc.index("## Units")]
    listed = set(re.findall(r"^  - `([\w/]+\.py)`", rooms, re.M))
    present = {str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    assert present - listed == set(), f"modules missing from docs/architecture.md's rooms: {sorted(present - listed)}"
    assert listed - present == set(), f"rooms listed that no longer exist: {sorted(listed - present)}"


def test_no_private_name_crosses_a_package():
    # issue 24 §1: a name one room keeps to itself (a leading underscore) is not imported by
    # another package; what another package needs has a public name
    cross = []
    for path in SRC.rglob("*.py"):
        here = path.relative_to(SRC).parts[0] if len(path.relative_to(SRC).parts) > 1 else ""
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("llmpar."):
                parts = node.module.split(".")
                there = parts[1] if len(parts) > 2 else ""
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if private and there != here:
                    cross.append((str(path.relative_to(SRC)), node.module, private))
    assert cross == [], cross
