#!/usr/bin/env bash
# Set up (see scripts/setup.sh, plus Chromium for the browser test) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh requirements-dev.txt chromium
exec .venv/bin/python -m pytest -q "$@"
