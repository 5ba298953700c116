#!/usr/bin/env bash
# timetile's one entry point for a fresh Debian/Ubuntu machine with Python 3.10+.
#
#   ./dev.sh demo   set up, then generate demo data, backfill it on local Spark, show rows
#   ./dev.sh test   set up, then run ruff, mypy and the whole pytest suite
#   ./dev.sh setup  only set up
#
# Setting up installs what is missing and nothing else: a JDK (openjdk-17-jre-headless) and
# redis-server from the OS packages, python3-venv if venv is unavailable, then a virtual
# environment in .venv with timetile and its dev tools.
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
        "$VENV/bin/python" -m pip install -q --upgrade pip
        "$VENV/bin/python" -m pip install -q -e ".[dev]"
        touch "$stamp"
    fi
}

# numba's on-disk cache keys a kernel on its own file only: a kernel that inlines a function
# of another file (the moment tree inlines core/aggregators/moments.py) would keep a stale
# copy after that file changes. Clear timetile's kernel caches when any of its files is newer.
clear_stale_kernels() {
    local stamp="$VENV/.timetile-kernels"
    if [ ! -f "$stamp" ] || [ -n "$(find timetile -name '*.py' -newer "$stamp" -print -quit)" ]; then
        find timetile -name '*.nbi' -delete -o -name '*.nbc' -delete
        touch "$stamp"
    fi
}

run_tests() {
    clear_stale_kernels
    say "ruff"
    "$VENV/bin/ruff" check .
    say "mypy"
    "$VENV/bin/mypy"
    say "pytest"
    "$VENV/bin/pytest" "$@"
}

command=${1:-help}
shift || true
case "$command" in
    setup) setup ;;
    demo) setup; "$VENV/bin/timetile" demo "$@" ;;
    test) setup; run_tests "$@" ;;
    *) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
