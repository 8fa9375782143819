#!/usr/bin/env bash
# Install everything wallflame and its samples need on a fresh Debian machine (run as root).
# Idempotent: packages already present are skipped, so a second run is quick.
#
#   bash scripts/setup.sh [EXTRAS]      # EXTRAS: pip extras to install too (default: dev)
#
# Python packages go into the project's own virtual environment, .venv/ in the checkout
# (Debian's python3 refuses `pip install` outside one: "externally-managed-environment"), made
# with /usr/bin/python3 (or $WALLFLAME_PYTHON). The package is installed editable, so the
# checkout is what runs; the native module is compiled there. A launcher,
# /usr/local/bin/wallflame, runs it for every user, root and sudo included.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
EXTRAS=${1:-dev}
VENV=$ROOT/.venv
LAUNCHER=${WALLFLAME_LAUNCHER:-/usr/local/bin/wallflame}

APT_PACKAGES=(
  linux-perf gdb elfutils libdw1 g++ make
  libicu-dev libconcurrentqueue-dev pkg-config golang-go
  libtcmalloc-minimal4 libjemalloc2
  percona-toolkit hyperfine bpftrace
  python3 python3-venv python3-dev
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing apt packages: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The interpreter the environment is made from: Debian's, unless told otherwise.
PYTHON=${WALLFLAME_PYTHON:-}
if [ -z "$PYTHON" ]; then
  if [ -x /usr/bin/python3 ]; then PYTHON=/usr/bin/python3; else PYTHON=$(command -v python3); fi
fi

# (Re)make the environment when it is missing or its interpreter no longer runs.
if ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
  echo "setup: making the virtual environment $VENV from $PYTHON" >&2
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip setuptools
fi
# (setuptools warns about any editable install at length: not needed on every run)
PYTHONWARNINGS=ignore::UserWarning \
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[$EXTRAS]"
# The package as one folder, build/view/wallflame/, for mypy and lint-imports (scripts/view.py).
"$VENV/bin/python" scripts/view.py

# The launcher: written when absent or one of ours, never over someone else's file.
MARK="# wallflame launcher (scripts/setup.sh)"
if [ ! -e "$LAUNCHER" ] || grep -qxF "$MARK" "$LAUNCHER" 2>/dev/null; then
  if { mkdir -p "$(dirname "$LAUNCHER")" &&
       printf '#!/bin/sh\n%s\nexec %q "$@"\n' "$MARK" "$VENV/bin/wallflame" >"$LAUNCHER.tmp" &&
       chmod 755 "$LAUNCHER.tmp" && mv -f "$LAUNCHER.tmp" "$LAUNCHER"; } 2>/dev/null; then
    :
  else
    rm -f "$LAUNCHER.tmp" 2>/dev/null || true
    echo "setup: could not write $LAUNCHER (not root?); run $VENV/bin/wallflame instead" >&2
  fi
else
  echo "setup: $LAUNCHER exists and is not wallflame's launcher; left alone" \
       "(run $VENV/bin/wallflame)" >&2
fi
