"""The package's shape: no import circle, the library never imports the CLI or the app, imports at the top."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "nirvana"
# Imported inside a function on purpose, each with a one-line reason at the import.
LOCAL_OK = {"huggingface_hub", "bitsandbytes", "datasets", "lm_eval", "matplotlib", "peft"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
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
                assert module.split(".")[0] in LOCAL_OK, f"{name}:{node.lineno} imports {module} inside {fn.name}"
            if local:
                above = lines[local[0].lineno - 2].strip()
                assert above.startswith("# here, not at the top:"), f"{name}:{local[0].lineno} gives no reason"
