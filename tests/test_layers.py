"""Imports point only downward: attention <- variants <- measure <- {gate, suite, testing, cli};
trace <- measure; report <- {suite, cli}. Top-level helper modules (units, storage) serve every layer."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "perfsuite"
SHARED = {"units", "storage"}
ALLOWED = {
    "attention": set(),
    "variants": {"attention"},
    "trace": set(),
    "measure": {"attention", "variants", "trace"},
    "gate": {"attention", "variants", "measure", "trace"},
    "testing": {"attention", "variants", "measure", "trace"},
    "report": {"attention"},
    "suite": {"attention", "variants", "measure", "trace", "gate", "report"},
    "cli": {"attention", "variants", "measure", "trace", "gate", "report", "suite"},
}


def imported_layers(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
        names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        found |= {name.split(".")[1] for name in names if name.startswith("perfsuite.")}
    return found


def test_every_layer_imports_only_the_layers_below_it():
    wrong = []
    for layer, allowed in ALLOWED.items():
        for path in (PACKAGE / layer).rglob("*.py"):
            extra = imported_layers(path) - allowed - SHARED - {layer}
            if extra:
                wrong.append(f"{path.relative_to(PACKAGE.parent)} imports {sorted(extra)}")
    assert not wrong, "\n".join(wrong)
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(ALLOWED)
