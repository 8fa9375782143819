#!/usr/bin/env bash
# The main job on a fresh machine: install everything, then run the demo (the mutex-bound queue
# before and after its lock-free fix: two reports and their diff in ./wallflame-demo/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec python3 -m wallflame demo -o "${1:-wallflame-demo}"
