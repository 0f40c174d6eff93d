#!/usr/bin/env bash
# Shared set-up for scripts/start.sh and scripts/test.sh: Debian packages (when root),
# a virtual environment at .venv, the pinned Python packages and distcore itself. Safe to re-run:
# each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."
REQUIREMENTS="${1:-requirements.txt}"
shift || true
DEBIAN_PACKAGES=("dataset-fashion-mnist" "$@")
PYTHON="${PYTHON:-python3}"
# The pinned numpy and keras need Python 3.11 or later: say so now, not halfway through pip.
# Only $PYTHON's job is to make .venv: once it exists (made with PYTHON=python3.12, say), a
# plain re-run must not trip over an older python3.
if [ ! -x .venv/bin/python ] && ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  # (Python 2 prints its version to stderr; a pyenv shim with no such Python fails: "missing")
  echo "setup: $PYTHON is $(v=$("$PYTHON" -V 2>&1) && echo "$v" || echo "missing"); distcore needs Python 3.11 or later." \
       "Install one and run again with PYTHON=python3.11 (or newer)." >&2
  exit 1
fi
# Debian's python3 makes a venv only with python3-venv installed (it brings ensurepip).
if [ ! -x .venv/bin/python ] && ! "$PYTHON" -c "import ensurepip" >/dev/null 2>&1; then
  DEBIAN_PACKAGES+=("python3-venv")
fi

missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: not root, skipping Debian packages ${missing[*]} (see docs/library.md, Data)" >&2
  fi
fi

if [ ! -x .venv/bin/python ]; then
  # A .venv whose python is gone (the interpreter that made it was removed) is made afresh:
  # a plain `venv` stops on its dangling links.
  [ -e .venv ] && echo "setup: .venv has no working python; making it again" || echo "setup: creating .venv"
  "$PYTHON" -m venv --clear .venv
fi
stamp=".venv/.installed-$(cat requirements*.txt | sha256sum | cut -c1-16)-$(basename "$REQUIREMENTS")"
if [ ! -f "$stamp" ]; then
  echo "setup: installing $REQUIREMENTS into .venv (first time: a few minutes)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r "$REQUIREMENTS"
  touch "$stamp"
fi
# distcore itself, editable: .venv/bin/python imports this checkout from any folder, and
# .venv/bin/distcore is `python -m distcore`. Done again when pyproject.toml or the
# checkout's place changes.
editable=".venv/.editable-$( (cat pyproject.toml; pwd -P) | sha256sum | cut -c1-16)"
if [ ! -f "$editable" ]; then
  echo "setup: installing distcore into .venv (editable)"
  # (quiet: setuptools warns on every editable install that a folder named like the package may shadow it)
  PYTHONWARNINGS=ignore .venv/bin/python -m pip install -q --no-deps -e .
  touch "$editable"
fi
