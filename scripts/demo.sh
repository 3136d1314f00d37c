#!/usr/bin/env bash
# The main job on one machine: install, build, run the three torch-doc examples on their rank
# counts (in C++, then in Python on pip's torch 2.x with backend="rdmacoll"), then a short
# all_gather_into_tensor size sweep on 4 local ranks. Shares its build (build/, .venv) with
# scripts/test.sh: either may run first, or again.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
echo "== packages ready after $SECONDS s"
# Configured as test.sh configures it (for /usr, what the .deb packages), so neither rebuilds
# the other's build. First only what the C++ examples need (the library, the launcher and the
# three examples: about a minute on 2 cores), so they print before anything else is built;
# test.sh builds the rest.
TARGETS="rdmacoll-run example_all_gather_flat example_all_gather_stacked example_all_gather_subgroup" \
  bash scripts/build.sh build -DCMAKE_INSTALL_PREFIX=/usr >/dev/null
echo "== library, launcher and examples built after $SECONDS s"
run=build/rdmacoll-run
echo "== Example 1: flat output, 2 ranks (rank 0 prints tensor([1., 2., 2., 3.]))"
$run -n 2 build/example_all_gather_flat
echo "== Example 2: stacked output, 2 ranks"
$run -n 2 build/example_all_gather_stacked
echo "== Example 3: new_group([0, 1]) out of 4 ranks"
$run -n 4 build/example_all_gather_subgroup
bash scripts/torch-venv.sh
echo "== pip's torch and the backend ready after $SECONDS s"
py=.venv/bin/python
echo "== The same three in Python: torch $("$py" -c 'import torch; print(torch.__version__)') with backend=\"rdmacoll\""
export OMP_NUM_THREADS=1
$run -n 2 "$py" examples/python/all_gather_flat.py
$run -n 2 "$py" examples/python/all_gather_stacked.py
$run -n 4 "$py" examples/python/all_gather_subgroup.py
TARGETS=all_gather_perf bash scripts/build.sh build -DCMAKE_INSTALL_PREFIX=/usr >/dev/null
echo "== all_gather_into_tensor sweep, 4 local ranks (UCX shared memory)"
$run -n 4 build/all_gather_perf -b 8 -e 16M -f 8 -n 20 -w 5 -c 1 | sed 's/^\[0\] //'
echo "== demo done in $SECONDS s"
