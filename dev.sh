#!/usr/bin/env bash
# timetile's one entry point for a fresh Debian/Ubuntu machine with Python 3.10+.
#
#   ./dev.sh demo   set up, then generate demo data, backfill it on local Spark, show rows
#   ./dev.sh test   set up, then run ruff, mypy and the whole pytest suite (arguments go to
#                   pytest: ./dev.sh test -m "not spark" is the fast lane, without Spark)
#   ./dev.sh setup  only set up
#
# Setting up installs what is missing and nothing else: a JDK (openjdk-17-jre-headless) and
# redis-server from the OS packages, python3-venv if venv is unavailable, then a virtual
# environment in .venv with timetile and its dev tools (installed by uv, or by pip with
# TIMETILE_INSTALLER=pip).
set -euo pipefail
cd "$(dirname "$0")"

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

apt_install() {
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "need root or sudo to apt-get install $*" >&2; exit 1; }
        sudo="sudo"
    fi
    say "installing $* from the OS packages"
    if [ -z "${APT_UPDATED:-}" ]; then
        $sudo apt-get update -qq
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

setup() {
    local wanted=()
    java_major=$(java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print v[1]}' || true)
    [ "${java_major:-0}" -ge 17 ] 2>/dev/null || wanted+=(openjdk-17-jre-headless)  # Spark 4 needs 17+
    command -v redis-server >/dev/null || wanted+=(redis-server)
    "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null || wanted+=(python3-venv)
    if [ ${#wanted[@]} -gt 0 ]; then apt_install "${wanted[@]}"; fi

    local stamp="$VENV/.timetile-installed"
    if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
        say "creating the virtual environment in $VENV"
        [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
        # uv (from PyPI, into the environment) installs what pip would, faster on a clean
        # machine: it downloads in parallel and builds pyspark's wheel (its one source
        # package) meanwhile. TIMETILE_INSTALLER=pip installs with pip alone, for a package
        # index that only pip's configuration names. Neither compiles bytecode: Python does
        # so on a module's first import, and most of pyspark's files never are.
        if [ "${TIMETILE_INSTALLER:-uv}" = uv ] && "$VENV/bin/python" -m pip install -q uv; then
            "$VENV/bin/python" -m uv pip install -q --python "$VENV/bin/python" -e ".[dev]"
        else
            "$VENV/bin/python" -m pip install -q --no-compile -e ".[dev]"
        fi
        touch "$stamp"
    fi
}

# numba's on-disk cache (cache=True) checks a kernel against its own file only: a kernel that
# compiles in code of another file (the moment tree inlines core/aggregators/moments.py, the
# sweep calls exact.py's two_sum) would keep a stale copy after that file changes. So clear the
# caches of a file that uses numba when a timetile file it imports, directly or through others,
# changed since the last run began; edits anywhere else keep them.
clear_stale_kernels() {
    "$VENV/bin/python" - "$VENV/.timetile-kernels" <<'PY'
import ast
import os
import re
import sys
import time
from pathlib import Path

stamp = Path(sys.argv[1])
began = time.time()
last = stamp.stat().st_mtime if stamp.is_file() else None


def module_file(name: str) -> Path | None:
    path = Path(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported(path: Path) -> set[Path]:
    """The timetile files ``path`` imports; ``from X import name`` of a submodule is its file."""
    package = list(path.parent.parts)
    found: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join([*package[:len(package) + 1 - node.level], node.module or ""]
                            if node.level else [node.module or ""]).strip(".")
            names = [f"{base}.{alias.name}" if module_file(f"{base}.{alias.name}") else base
                     for alias in node.names]
        else:
            continue
        found |= {file for name in names if name.split(".")[0] == "timetile"
                  and (file := module_file(name)) is not None}
    return found


def closure(path: Path) -> set[Path]:
    seen, todo = {path}, [path]
    while todo:
        for file in imported(todo.pop()) - seen:
            seen.add(file)
            todo.append(file)
    return seen - {path}


for kernel in sorted(Path("timetile").rglob("*.py")):
    if not re.search(r"^\s*(import|from) numba\b", kernel.read_text(encoding="utf-8"), re.M):
        continue
    changed = sorted(str(dep) for dep in closure(kernel)
                     if last is None or dep.stat().st_mtime > last)
    caches = [path for suffix in ("nbi", "nbc")
              for path in kernel.parent.glob(f"__pycache__/{kernel.stem}.*.{suffix}")]
    if changed and caches:
        print(f"clearing the numba caches of {kernel}: "
              + ("first run" if last is None else f"{', '.join(changed)} changed"))
        for cache in caches:
            cache.unlink(missing_ok=True)
stamp.touch()
os.utime(stamp, (began, began))
PY
}

run_tests() {
    clear_stale_kernels
    say "ruff"
    "$VENV/bin/ruff" check .
    # mypy checks beside pytest, whose processes leave the cores idle at times (collecting,
    # starting Spark, waiting on a subprocess): its report and its verdict come after pytest's.
    local mypy_log mypy_pid status=0
    mypy_log=$(mktemp)
    "$VENV/bin/mypy" >"$mypy_log" 2>&1 &
    mypy_pid=$!
    trap "kill $mypy_pid 2>/dev/null || true; rm -f '$mypy_log'" EXIT
    say "pytest (mypy checks beside it)"
    # On TEST_WORKERS processes (pytest-xdist, 2 by default, 0 for one process), each with its
    # own SparkSession; a module runs whole on one worker, so its module fixtures run once.
    "$VENV/bin/pytest" -n "${TEST_WORKERS:-2}" --dist loadscope "$@" || status=$?
    say "mypy"
    wait "$mypy_pid" || status=$((status ? status : 1))
    trap - EXIT
    cat "$mypy_log"
    rm -f "$mypy_log"
    return "$status"
}

command=${1:-help}
shift || true
case "$command" in
    setup) setup ;;
    demo) setup; "$VENV/bin/timetile" demo "$@" ;;
    test) setup; run_tests "$@" ;;
    *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
