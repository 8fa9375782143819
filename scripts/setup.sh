#!/usr/bin/env bash
# Install everything wallflame and its samples need on a fresh Debian machine (run as root).
# Idempotent: packages already present are skipped, so a second run is quick.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  linux-perf gdb elfutils libdw1 g++ make
  libicu-dev libconcurrentqueue-dev pkg-config golang-go
  libtcmalloc-minimal4 libjemalloc2
  percona-toolkit hyperfine
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

python3 -m pip install -q --disable-pip-version-check -e '.[dev]'
