"""The import order of the design, checked on the source: contracts → policy → (actors, learner,
level_service, replay_service) → families → deploy → the `levelray` API, each part importing only those before it,
the four middle parts never each other, and no cycle between modules. The env families are found by name
(`contracts.families`): no module outside `families/` imports one. Inside `deploy/` the same rule orders
its sub-packages, grouped by job: (errors, rundir) → (cluster, monitoring) → evaluation → (training, report)
→ sweep → cli.

Every import counts — at module level, inside functions, and under `TYPE_CHECKING` — because a
function-level import is how a cycle usually hides.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# package -> layer; a part may import its own package and any package of a lower layer.
LAYERS = {
    "contracts": 0,
    "policy": 1,
    "actors": 2,
    "learner": 2,
    "level_service": 2,
    "replay_service": 2,
    "families": 3,
    "deploy": 4,
}
API_LAYER = 5  # levelray/__init__.py and anything else in levelray/
# deploy's sub-packages (and its top-level modules) -> sub-layer, ordered the same way inside deploy's layer.
DEPLOY_LAYERS = {
    "errors": 0,
    "rundir": 0,
    "cluster": 1,
    "monitoring": 1,
    "evaluation": 2,
    "training": 3,
    "report": 3,
    "sweep": 4,
    "cli": 5,
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] != "levelray":
        parts.insert(0, "levelray")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _source_files() -> list[Path]:
    files = []
    for folder in [*LAYERS, "levelray"]:
        files.extend(sorted((ROOT / folder).rglob("*.py")))
    return files


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    """`(line, imported levelray module)` for every import in the file, resolved to a module name."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            # `from levelray.learner import vtrace` imports the submodule levelray.learner.vtrace.
            found.extend((node.lineno, f"{target}.{alias.name}") for alias in node.names)
    return [(line, name) for line, name in found if name == "levelray" or name.startswith("levelray.")]


def _layer(module: str) -> tuple[str, float]:
    """`(part, layer)`: a deploy module's part is its sub-package, placed by `DEPLOY_LAYERS` inside deploy's layer
    (an undeclared one fails with a KeyError: a new sub-package must be placed)."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] not in LAYERS:
        return "levelray", API_LAYER
    if parts[1] == "deploy" and len(parts) > 2:
        return f"deploy.{parts[2]}", LAYERS["deploy"] + DEPLOY_LAYERS[parts[2]] / (max(DEPLOY_LAYERS.values()) + 1)
    return parts[1], LAYERS[parts[1]]


def _graph() -> dict[str, list[tuple[int, str]]]:
    modules = {_module_name(p): p for p in _source_files()}
    graph = {}
    for module, path in modules.items():
        edges = []
        for line, target in _imports(path, module):
            # `from pkg import name` also yields pkg.name, which is a module only when such a file exists.
            # A module's own packages are initialised before it by Python itself: not an edge one can remove.
            if target in modules and not (module == target or module.startswith(target + ".")):
                edges.append((line, target))
        graph[module] = edges
    return graph


def layer_violations(graph: dict[str, list[tuple[int, str]]]) -> list[str]:
    bad = []
    for module, edges in graph.items():
        package, layer = _layer(module)
        for line, target in edges:
            target_package, target_layer = _layer(target)
            if target_package == package:
                continue
            if target_layer >= layer:
                bad.append(f"{module}:{line} imports {target} ({target_package} is not below {package})")
    return bad


def cycles(graph: dict[str, list[tuple[int, str]]]) -> list[list[str]]:
    """Strongly connected components with more than one module (or a self-import), by Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for _, w in graph.get(v, []):
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
            if len(component) > 1 or any(w == v for _, w in graph.get(v, [])):
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_part_imports_only_the_parts_below_it():
    graph = _graph()
    assert len(graph) > 40, "the walk found too few modules: is the layout still the one this test knows?"
    assert layer_violations(graph) == []


def test_no_module_outside_the_families_imports_one():
    """Every part asks a family through `contracts.families`, so that adding one touches its own folder only."""
    found = [f"{module}:{line} imports {target}" for module, edges in _graph().items()
             if not module.startswith("levelray.families") for line, target in edges
             if target.startswith("levelray.families")]
    assert found == []


def test_no_module_takes_part_in_an_import_cycle():
    assert cycles(_graph()) == []


@pytest.mark.parametrize(
    "graph, expected_violations, expected_cycles",
    [
        # contracts importing the sampler (what contracts/config.py once did): against the order.
        (
            {
                "levelray.contracts.config": [(3, "levelray.level_service.sampler")],
                "levelray.level_service.sampler": [],
            },
            1,
            0,
        ),
        # two middle parts importing each other: both against the order, and a cycle.
        ({"levelray.learner.a": [(1, "levelray.actors.b")], "levelray.actors.b": [(2, "levelray.learner.a")]}, 2, 1),
        # a cycle inside one package is allowed by the order but still a cycle.
        ({"levelray.deploy.training.a": [(1, "levelray.deploy.training.b")],
          "levelray.deploy.training.b": [(9, "levelray.deploy.training.a")]}, 0, 1),
        # downward imports only: clean.
        ({"levelray.deploy.cli": [(1, "levelray.policy.models")], "levelray.policy.models": []}, 0, 0),
        # inside deploy: evaluation reaching up into training is against the order, training down into it is not.
        ({"levelray.deploy.evaluation.video": [(4, "levelray.deploy.training.driver")],
          "levelray.deploy.training.driver": [(7, "levelray.deploy.evaluation.episodes")],
          "levelray.deploy.evaluation.episodes": []}, 1, 0),
    ],
)
def test_the_checks_catch_what_they_are_for(graph, expected_violations, expected_cycles):
    assert len(layer_violations(graph)) == expected_violations
    assert len(cycles(graph)) == expected_cycles
