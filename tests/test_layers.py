"""The package's layers (DESIGN §3), checked on the source: who may import whom.

``core`` is engine-free; ``api`` is the standard library and ``core``; ``spark`` is the
Spark plumbing every engine shares and imports only those two; ``offline`` and ``online``
never import each other or ``streaming``; ``streaming`` writes through the online store
(``online``) but never reaches into ``offline``. Imports inside functions count too.
"""

from __future__ import annotations

import ast
import subprocess
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
    return imports_in(path.read_text(), path.relative_to(PACKAGE.parent).with_suffix("").parts)


def imports_in(source: str, module: tuple[str, ...]) -> set[str]:
    """Return the modules that ``source``, the text of ``module``, imports.

    Relative imports are resolved against the module's package, and ``from timetile import
    offline`` names ``timetile.offline`` (a name that is no module of timetile is left out).
    """
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(module[:len(module) - node.level]) if node.level else ""
            name = ".".join(part for part in (base, node.module or "") if part)
            names.add(name)
            if name == "timetile":
                names.update(f"timetile.{alias.name}" for alias in node.names
                             if (PACKAGE / alias.name).is_dir()
                             or (PACKAGE / f"{alias.name}.py").is_file())
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


def test_the_check_sees_a_crossing() -> None:
    module = ("timetile", "online", "probe")
    crossings = {
        "def f():\n    from timetile.offline.backfill import backfill\n":
            "timetile.offline.backfill",
        "from ..offline import plan\n": "timetile.offline",
        "from timetile import streaming, __version__\n": "timetile.streaming",
    }
    for source, name in crossings.items():
        assert name in imports_in(source, module), source
    assert "timetile.__version__" not in imports_in("from timetile import __version__", module)


def test_serving_never_loads_spark() -> None:
    """A fetcher, an HTTP server or the command line imports no Spark until a job runs.

    ``tt.backfill`` loads on first use, and the Spark commands load it when they run.
    """
    script = ("import sys, timetile.online.server, timetile.online.fetcher, "
              "timetile.store.redis_store, timetile.cli.app\n"
              "loaded = [m for m in sys.modules if m.split('.')[0] == 'pyspark'\n"
              "          or m.startswith(('timetile.offline.', 'timetile.spark'))\n"
              "          and m not in ('timetile.offline.options', 'timetile.offline.report')]\n"
              "print(','.join(loaded))\n"
              "import timetile\n"
              "assert timetile.backfill.__module__ == 'timetile.offline.backfill'\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == ""
