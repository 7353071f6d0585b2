"""The package's shape: no import circle between modules or between packages, the library never imports
the CLI or the app, model anatomy at the bottom, imports at the top."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "nirvana"
# Imported inside a function on purpose, each with a one-line reason at the import.
LOCAL_OK = {"huggingface_hub", "bitsandbytes", "datasets", "lm_eval", "matplotlib", "peft", "ray"}
# Imported inside a function to keep an import path light (the CLI answers a bad argument before it imports
# transformers' modeling): the package's own modules, transformers and torch.distributed, each with its reason.
DEFERRED_OK = {"nirvana", "transformers", "torch"}


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(path: Path) -> list[tuple[ast.AST, str]]:
    """(node, imported module or module.name) for every import in the file, wherever it sits."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [(node, f"{node.module}.{a.name}") for a in node.names] + [(node, node.module)]
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {
        name: {target for _, target in _imports(path) if target in modules and target != name}
        for name, path in modules.items()
    }


def test_no_import_circle_in_the_package():
    graph, state, stack = _graph(), {}, []

    def visit(node):  # depth-first search; a grey node met again closes a circle
        state[node] = "grey"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "grey":
                raise AssertionError("import circle: " + " -> ".join([*stack[stack.index(nxt) :], nxt]))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "black"

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_the_library_never_imports_the_cli_or_the_app():
    for name, path in _modules().items():
        if name.startswith("nirvana.cli") or name == "nirvana.__main__":
            continue
        for _, target in _imports(path):
            assert not target.startswith(("nirvana.cli", "streamlit", "ui")), f"{name} imports {target}"


def test_imports_inside_functions_are_only_optional_dependencies_with_a_reason():
    for name, path in _modules().items():
        lines = path.read_text().splitlines()
        tree = ast.parse(path.read_text())
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            local = sorted(
                (n for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))), key=lambda n: n.lineno
            )
            for node in local:
                module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                assert module.split(".")[0] in LOCAL_OK | DEFERRED_OK, (
                    f"{name}:{node.lineno} imports {module} inside {fn.name}"
                )
            if local:
                above = lines[local[0].lineno - 2].strip()
                assert above.startswith("# here, not at the top:"), f"{name}:{local[0].lineno} gives no reason"


# A family folder holds one family's code, which spans the layers (its anatomy, its scoring, its slicing, its
# measures, its sweep): each module of it sits in the layer named here and is checked as part of that layer.
# Its `__init__.py` imports nothing, so that a low layer importing the anatomy pulls in nothing above it.
FAMILY_FOLDERS = {
    "t5": {
        "anatomy": "models",
        "modeling_t5_sliced": "models",
        "scoring": "scoring",
        "slicing": "pruning",
        "checkpoint": "checkpoints",
        "measure": "measure",
        "speed": "measure",
        "sweep": "search",
        "steps": "pipeline",
    },
}


def _unit(module: str) -> str:
    """The package-level node of a module: `nirvana.models.shapes` -> `models`, `nirvana.pipeline` -> `pipeline`;
    a family folder's module -> the layer `FAMILY_FOLDERS` places it in (`nirvana.t5.slicing` -> `pruning`)."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in FAMILY_FOLDERS:
        return FAMILY_FOLDERS[parts[1]].get(parts[2], "unplaced") if len(parts) > 2 else "errors"
    return parts[1] if len(parts) > 1 else "nirvana"


def package_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """unit -> units it imports, over the package's subpackages and top-level modules (the root
    `nirvana/__init__.py`, the public re-exports, is its own node and may import anything)."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        source = _unit(name)
        targets = {_unit(t) for _, t in _imports(path) if t in modules and t != "nirvana"}
        graph.setdefault(source, set()).update(targets - {source})
    return graph


def package_loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one unit (Tarjan), each sorted: the loops."""
    index, low, stack, on_stack, loops = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                loops.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(loops)


def test_no_import_loop_between_packages():
    assert package_loops(package_graph()) == []


def test_a_planted_package_loop_is_caught(tmp_path):
    """The check above can fail: model anatomy importing the checkpoints package closes a loop
    (checkpoints imports models), and so does a store that imports pruning (pruning -> scoring -> store)."""
    copy = tmp_path / "nirvana"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert package_loops(package_graph(copy)) == []
    weights = copy / "models" / "weights.py"
    weights.write_text(weights.read_text() + "\nimport nirvana.checkpoints.loaded\n")
    loops = package_loops(package_graph(copy))
    assert loops and {"models", "checkpoints"} <= set(loops[0])
    weights.write_text(weights.read_text().replace("import nirvana.checkpoints.loaded", ""))
    paths = copy / "store" / "paths.py"
    paths.write_text(paths.read_text() + "\nfrom nirvana.pruning.plan import PruningPlan\n")
    (ring,) = package_loops(package_graph(copy))  # data and guard import store, so they join the group
    assert {"pruning", "scoring", "store"} <= set(ring)


def test_model_anatomy_and_the_store_sit_at_the_bottom():
    """models/ (architectures, shapes, weights, fingerprint, registry) and store/ (atomic files,
    cache paths, content keys) import nothing of the package above errors."""
    graph = package_graph()
    assert graph["models"] <= {"errors"}, graph["models"]
    assert graph["store"] <= {"errors"}, graph["store"]


# The layers, bottom to top, as docs/LAYOUT.md draws them: a unit imports only units before it.
LAYERS = [
    "errors",
    "progress",
    "reference",
    "store",
    "cluster",
    "models",
    "guard",
    "data",
    "scoring",
    "pruning",
    "methods",
    "export",
    "checkpoints",
    "runs",
    "accuracy",
    "measure",
    "recovery",
    "search",
    "pipeline",
    "charts",
    "bench",
    "cli",
    "__main__",
]


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(unit, unit it imports) for every import that does not go down the layers."""
    return [(a, b) for a, deps in graph.items() if a != "nirvana" for b in deps if LAYERS.index(b) >= LAYERS.index(a)]


def test_every_package_imports_only_the_layers_below_it():
    graph = package_graph()
    assert set(graph) - {"nirvana"} == set(LAYERS), "a new package: place it in LAYERS and in docs/LAYOUT.md"
    upward = upward_imports(graph)
    assert upward == [], f"imports that go up (or sideways) the layers: {upward}"


def test_a_family_folder_places_every_module_and_its_init_imports_nothing():
    for folder, placed in FAMILY_FOLDERS.items():
        modules = {p.stem for p in (PACKAGE / folder).glob("*.py")} - {"__init__"}
        assert modules == set(placed), f"nirvana/{folder}/: place each module in a layer (FAMILY_FOLDERS)"
        assert set(placed.values()) <= set(LAYERS)
        assert _imports(PACKAGE / folder / "__init__.py") == [], f"nirvana/{folder}/__init__.py imports"


def test_a_family_module_that_imports_above_its_layer_is_caught(tmp_path):
    """The slicing of a family sits in `pruning`: importing its measures (`measure`) from there goes up."""
    copy = tmp_path / "nirvana"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    slicing = copy / "t5" / "slicing.py"
    slicing.write_text(slicing.read_text() + "\nfrom nirvana.t5.measure import seq2seq_perplexity\n")
    assert ("pruning", "measure") in upward_imports(package_graph(copy))


def test_the_layout_page_draws_the_layers_in_order():
    page = (ROOT / "docs" / "LAYOUT.md").read_text()
    layout = page[page.index("```") :]  # the drawing, not the prose above it
    positions = [
        layout.index(f"  {name}/") if f"  {name}/" in layout else layout.index(f"{name}.py") for name in LAYERS[3:-2]
    ]
    assert positions == sorted(positions), "docs/LAYOUT.md lists the packages out of layer order"
