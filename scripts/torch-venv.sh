#!/usr/bin/env bash
# A virtual environment (.venv, or $1) with pip's torch 2.x and rdmacoll's torch backend built
# against it by `pip install .`: what a PyTorch user of rdmacoll has. Safe to run again: torch
# is installed once, and the backend's build directory (build/wheel-*) is kept, so a second
# install recompiles only what changed. TORCH_SPEC picks another torch (default: the tested one).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv}
spec=${TORCH_SPEC:-torch==2.15.0}
# Debian's python3 (with python3-venv): its headers are the ones the extension compiles against.
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
py=$venv/bin/python
if ! "$py" -c "import torch, numpy, pytest" 2>/dev/null ||
  [ "$("$py" -c 'import torch; print("torch==" + torch.__version__.split("+")[0])')" != "$spec" ]; then
  start=$SECONDS
  "$py" -m pip install -q "$spec" numpy pytest
  echo "torch-venv: $spec installed in $((SECONDS - start)) s"
fi
start=$SECONDS
"$py" -m pip install -q .
echo "torch-venv: rdmacoll-torch $("$py" -c 'import importlib.metadata as m; print(m.version("rdmacoll-torch"))') installed in $((SECONDS - start)) s"
