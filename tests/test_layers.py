"""The layering of DESIGN.md holds: every import points down its table, and no modules import in a cycle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "perfsuite"
BASE = {"errors", "storage", "units", "__init__"}


def allowed_imports() -> dict[str, set[str]]:
    """layer -> layers it may import, read from DESIGN.md's 'may import' table."""
    text = (ROOT / "DESIGN.md").read_text()
    block = re.search(r"```text\nlayer\s+may import\n(.*?)```", text, re.S).group(1)
    table = {}
    for line in block.strip().splitlines():
        layer, *targets = line.split()
        table[layer] = {t for t in targets if t != "-"} | {layer}
    return table


def layer_of(module: str) -> str:
    """``perfsuite.gate.ab`` -> ``gate``; ``perfsuite.errors`` -> ``base``."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] == "__main__":
        return "cli"  # python -m perfsuite runs the command line
    return "base" if len(parts) < 2 or parts[1] in BASE else parts[1]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """perfsuite modules imported anywhere in ``path`` (lazy imports inside functions included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("perfsuite"):
            found.add(node.module)
            found.update(
                f"{node.module}.{a.name}"
                for a in node.names
                if (PACKAGE.parent / f"{node.module}.{a.name}".replace(".", "/"))
                .with_suffix(".py")
                .exists()
            )
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("perfsuite"))
    return found


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def test_the_design_table_names_every_layer():
    layers = {layer_of(m) for m in MODULES}
    assert layers <= set(allowed_imports()), (
        f"layers missing from DESIGN.md: {layers - set(allowed_imports())}"
    )


def violations(modules: dict[str, Path]) -> list[str]:
    """``module (layer) imports target (layer)`` for each import against DESIGN.md's table."""
    table = allowed_imports()
    return sorted(
        f"{m} ({layer_of(m)}) imports {target} ({layer_of(target)})"
        for m, path in modules.items()
        for target in imports_of(path)
        if target != "perfsuite" and layer_of(target) not in table[layer_of(m)]
    )


def test_imports_point_only_down_the_layers():
    wrong = violations(MODULES)
    assert not wrong, "imports against DESIGN.md:\n" + "\n".join(wrong)


def test_no_import_cycles():
    graph = {
        m: {t for t in imports_of(p) if t in MODULES and t != m and t != "perfsuite"}
        for m, p in MODULES.items()
    }
    cycles = []

    def visit(node, stack):
        for nxt in graph[node]:
            if nxt in stack:
                cycles.append(" -> ".join(stack[stack.index(nxt) :] + [nxt]))
            elif nxt not in done:
                visit(nxt, stack + [nxt])
        done.add(node)

    done: set[str] = set()
    for module in sorted(graph):
        if module not in done:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(sorted(set(cycles)))


def test_a_wrong_import_is_caught(tmp_path):
    """The checker itself: a measure module importing the suite, even lazily, is reported."""
    module = tmp_path / "upward.py"
    module.write_text("def f():\n    from perfsuite.suite.session import SuiteSession\n")
    assert violations({"perfsuite.measure.upward": module}) == [
        "perfsuite.measure.upward (measure) imports perfsuite.suite.session (suite)"
    ]
