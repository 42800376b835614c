#!/usr/bin/env bash
# Creates .venv from the lock file with nothing but python3 on the machine; sourced by serve and test.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if [ ! -x .venv/bin/uv ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check "uv==0.13.9"
fi
# --inexact keeps uv itself in the environment; --frozen refuses to touch the lock.
# --compile-bytecode writes the .pyc files as `pip install` does: without them every process
# (each `multibank --help`, each test server) compiles its libraries' sources again, about 0.4 s
# of CPU (decision 0050); with them already written, a sync takes under a second.
UV_PROJECT_ENVIRONMENT=.venv .venv/bin/uv sync -q --frozen --inexact --compile-bytecode "$@"
