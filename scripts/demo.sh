#!/usr/bin/env bash
# The main job on a fresh machine: install everything, then run the demo (the mutex-bound queue
# before and after its lock-free fix: two reports and their diff in ./wallflame-demo/).
# wallflame runs from the project's virtual environment, .venv/ (made by scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m wallflame demo -o "${1:-wallflame-demo}"
