#!/usr/bin/env bash
# Set up (see scripts/setup.sh) and start the web app on http://127.0.0.1:7860.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh requirements.txt
exec .venv/bin/python app.py "$@"
