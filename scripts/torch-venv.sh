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
# The backend is rebuilt only when its sources changed since the last install here (the README's
# second command reuses what the first installed): a stamp of the tracked sources and of any
# uncommitted change to them. Outside a git checkout it always reinstalls.
stamp_file=$venv/.rdmacoll-sources
stamp=
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  paths=(pyproject.toml CMakeLists.txt cmake include src python)
  stamp=$({ git ls-files -s -- "${paths[@]}"; git diff HEAD -- "${paths[@]}";
            git ls-files -o --exclude-standard -z -- "${paths[@]}" | xargs -0 -r sha1sum
            echo "$spec"; } | sha1sum)
fi
version() { "$py" -c 'import importlib.metadata as m; print(m.version("rdmacoll-torch"))'; }
if [ -n "$stamp" ] && [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp" ] &&
  "$py" -c "import rdmacoll_torch" 2>/dev/null; then
  echo "torch-venv: rdmacoll-torch $(version) is up to date (its sources have not changed)"
  exit 0
fi
rm -f "$stamp_file"
start=$SECONDS
"$py" -m pip install -q .
[ -z "$stamp" ] || echo "$stamp" >"$stamp_file"
echo "torch-venv: rdmacoll-torch $(version) installed in $((SECONDS - start)) s"
