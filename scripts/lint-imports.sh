#!/usr/bin/env bash
# The layering contracts in pyproject.toml, checked by lint-imports in build/view (see
# scripts/view.py): grimp reads a package from its one folder, which only the view is.
#
#   bash scripts/lint-imports.sh [LINT-IMPORTS OPTIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
"$ROOT/.venv/bin/python" scripts/view.py
cd build/view  # (its pyproject.toml is the checkout's)
exec "$ROOT/.venv/bin/lint-imports" "$@"
