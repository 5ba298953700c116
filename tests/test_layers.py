"""The package's layers (DESIGN §3), checked on the source: who may import whom.

``core`` is engine-free; ``api`` is the standard library and ``core``; ``spark`` is the
Spark plumbing every engine shares and imports only those two; ``offline`` and ``online``
never import each other or ``streaming``; ``streaming`` writes through the online store
(``online``) but never reaches into ``offline``. Imports inside functions count too.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "timetile"

#: For each layer, the timetile layers it may import (itself included).
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset({"core"}),
    "api": frozenset({"api", "core"}),
    "spark": frozenset({"spark", "api", "core"}),
    "offline": frozenset({"offline", "spark", "api", "core"}),
    "online": frozenset({"online", "spark", "api", "core"}),
    "streaming": frozenset({"streaming", "online", "spark", "api", "core"}),
}
#: Engines ``core`` must run without.
ENGINES = frozenset({"pyspark", "py4j", "redis", "fastapi", "uvicorn", "lmdb", "pyarrow"})


def imported(path: Path) -> set[str]:
    """Return the dotted names of every module ``path`` imports, anywhere in the file."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def modules(layer: str) -> list[Path]:
    """Return the source files of one layer."""
    return sorted((PACKAGE / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_a_layer_imports_only_the_layers_under_it(layer: str) -> None:
    crossings = []
    for path in modules(layer):
        for name in imported(path):
            parts = name.split(".")
            if parts[0] == "timetile" and len(parts) > 1 and parts[1] not in ALLOWED[layer]:
                crossings.append(f"{path.relative_to(PACKAGE.parent)} imports {name}")
    assert modules(layer), f"no modules found for {layer}"
    assert not crossings, "\n".join(crossings)


def test_core_runs_without_an_engine() -> None:
    found = [f"{path.relative_to(PACKAGE.parent)} imports {name}"
             for path in modules("core") for name in imported(path)
             if name.split(".")[0] in ENGINES]
    assert not found, "\n".join(found)


def test_api_needs_only_the_standard_library() -> None:
    found = [f"{path.relative_to(PACKAGE.parent)} imports {name}"
             for path in modules("api") for name in imported(path)
             if name.split(".")[0] not in (*sys.stdlib_module_names, "timetile")]
    assert not found, "\n".join(found)


def test_the_check_sees_a_crossing(tmp_path: Path) -> None:
    source = tmp_path / "bad.py"
    source.write_text("def f():\n    from timetile.offline.backfill import backfill\n")
    assert "timetile.offline.backfill" in imported(source)
