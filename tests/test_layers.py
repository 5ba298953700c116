"""The package's layers (DESIGN §3), checked on the source against docs/architecture.md.

The table of docs/architecture.md is the architecture: for each folder of the package (and
the package root), the timetile folders it may import and the packages it never loads. This
test reads that table, so the page and the check cannot drift apart, and checks every module:
its imports (inside functions too) name only allowed folders and no forbidden package, and in
a fresh interpreter, importing every module of a folder loads none of its forbidden
packages, whatever it imports on the way. Every folder must have a row.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "timetile"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
#: The row of the package's own modules (``timetile/__init__.py``, ``__main__.py``).
ROOT_LAYER = "(root)"


def read_table() -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """Return docs/architecture.md's table: folder → (folders it may import, never loads)."""
    rows: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    for line in ARCHITECTURE.read_text().splitlines():
        match = re.match(r"^\| `([^`]+)` \|[^|]*\|([^|]*)\|([^|]*)\|$", line)
        if match is None:
            continue
        folder, allowed, forbidden = match.groups()
        rows[folder] = (frozenset(_names(allowed)), frozenset(_names(forbidden)))
    return rows


def _names(cell: str) -> list[str]:
    return [name.strip() for name in cell.split(",") if name.strip()]


LAYERS = read_table()


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
    """Return the source files of one layer (the root's own modules for ``(root)``)."""
    if layer == ROOT_LAYER:
        return sorted(PACKAGE.glob("*.py"))
    return sorted((PACKAGE / layer).rglob("*.py"))


def module_name(path: Path) -> str:
    """Return the dotted module name of a source file of the package."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_table_names_every_folder_and_nothing_else() -> None:
    folders = {path.name for path in PACKAGE.iterdir()
               if path.is_dir() and (path / "__init__.py").is_file()}
    assert folders | {ROOT_LAYER} == set(LAYERS)
    assert {path.name for path in modules(ROOT_LAYER)} == {"__init__.py", "__main__.py"}, (
        "the package root holds only __init__ and __main__: give a module a folder")
    stray = [path for path in PACKAGE.iterdir() if path.is_dir()
             and not path.name.startswith((".", "__")) and path.name not in LAYERS]
    assert not stray, f"folders that are no package: {stray}"


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_a_layer_imports_only_the_layers_it_may(layer: str) -> None:
    allowed, forbidden = LAYERS[layer]
    crossings = []
    for path in modules(layer):
        for name in imported(path):
            parts = name.split(".")
            if parts[0] == "timetile" and len(parts) > 1 and parts[1] not in allowed \
                    and parts[1] not in ("__version__",):
                crossings.append(f"{path.relative_to(ROOT)} imports {name}")
            if parts[0] in forbidden:
                crossings.append(f"{path.relative_to(ROOT)} imports {name}, which {layer} "
                                 "never loads")
    assert modules(layer), f"no modules found for {layer}"
    assert not crossings, "\n".join(crossings)


def test_api_needs_only_the_standard_library() -> None:
    found = [f"{path.relative_to(ROOT)} imports {name}"
             for path in modules("api") for name in imported(path)
             if name.split(".")[0] not in (*sys.stdlib_module_names, "timetile")]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("layer", sorted(layer for layer, (_, forbidden) in LAYERS.items()
                                         if forbidden))
def test_a_layer_loads_none_of_what_it_never_loads(layer: str) -> None:
    """Import every module of the layer in a fresh interpreter; list the forbidden loaded."""
    _, forbidden = LAYERS[layer]
    names = [module_name(path) for path in modules(layer) if path.name != "__main__.py"]
    script = (f"import importlib, sys\nfor name in {names!r}:\n"
              "    importlib.import_module(name)\n"
              f"print(','.join(sorted({{m.split('.')[0] for m in sys.modules}} & "
              f"set({sorted(forbidden)!r}))))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "", f"{layer} loads {result.stdout.strip()}"


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
    assert LAYERS["online"][0] >= {"store", "core"}
    assert "offline" not in LAYERS["online"][0]
    assert "pyspark" in LAYERS["online"][1]


def test_serving_never_loads_spark() -> None:
    """The package, its definitions, the store, serving and the command line load no Spark.

    ``tt.backfill`` loads on first use, and the Spark commands load it when they run.
    """
    script = ("import sys, timetile, timetile.api, timetile.store.kv, "
              "timetile.store.lmdb_store, timetile.store.redis_store, timetile.store.layout, "
              "timetile.store.tiles, timetile.store.entity_records, timetile.online.server, "
              "timetile.online.fetcher, timetile.online.response_log, timetile.cli\n"
              "loaded = [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')\n"
              "          or m.startswith(('timetile.offline.', 'timetile.spark'))\n"
              "          and m not in ('timetile.offline.options', 'timetile.offline.report')]\n"
              "print(','.join(loaded))\n"
              "assert timetile.backfill.__module__ == 'timetile.offline.backfill'\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == ""
