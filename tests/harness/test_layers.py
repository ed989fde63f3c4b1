"""The harness's layers (docs/harness.md, "Layers"), read from the modules' own imports: a
module low in the house imports only the modules the docs allow it, so that the records,
the parsers and the presentation stay usable without the machine, and `nexos --help` never
loads matplotlib."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "harness" / "nexos"

# module (a file, or a folder for all its files) -> the nexos modules it may import
LAYERS = {
    "machine/limits": set(),
    "machine/config": {"machine/limits"},
    "programs/kvcache": {"model/format", "machine/limits"},
    "records": {"programs/kvcache", "machine/limits"},
    "parse": {"records"},
    "programs/serve": {"machine/config", "parse", "records"},
    "programs/tables": {"records", "parse"},
    "course/report": {"records", "parse"},
}


def nexos_imports(path: Path, top_level_only: bool) -> set[str]:
    """The nexos modules `path` imports, as paths under harness/nexos/ without `.py` (a
    package import names its folder); with top_level_only, not those inside functions."""
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return {n.removeprefix("nexos.").replace(".", "/") for n in names
            if n.startswith("nexos.")}


def files_of(module: str) -> list[Path]:
    folder = PACKAGE / module
    return sorted(folder.glob("*.py")) if folder.is_dir() else [PACKAGE / f"{module}.py"]


def allowed(imported: str, module: str) -> bool:
    """A module may import what LAYERS lists, anything under a listed folder, and its own
    folder's modules."""
    return any(imported == a or imported.startswith(a + "/")
               for a in (*LAYERS[module], module))


@pytest.mark.parametrize("module", list(LAYERS))
def test_each_layer_imports_only_what_the_docs_allow(module: str) -> None:
    for path in files_of(module):
        extra = {m for m in nexos_imports(path, False) if not allowed(m, module)}
        assert not extra, f"{path.relative_to(PACKAGE)} imports {sorted(extra)}"


def test_the_command_line_loads_plot_only_inside_nexos_plot() -> None:
    for path in PACKAGE.rglob("*.py"):
        if path.name != "plot.py":
            assert "programs/plot" not in nexos_imports(path, True), path


def test_the_docs_state_these_layers() -> None:
    text = " ".join((PACKAGE.parents[1] / "docs" / "harness.md").read_text().split())
    assert "`programs/serve` only `config`, `parse` and `records`" in text
    assert "`programs/tables` and `course/report` only `records` and `parse`" in text
    assert "tests/harness/test_layers.py" in text
