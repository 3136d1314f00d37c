#!/usr/bin/env bash
# The main job on one machine: install, build, run the three torch-doc examples on their rank
# counts (in C++, then in Python on torch with backend="rdmacoll"), then a short
# all_gather_into_tensor size sweep on 4 local ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build >/dev/null
run=build/rdmacoll-run
echo "== Example 1: flat output, 2 ranks (rank 0 prints tensor([1., 2., 2., 3.]))"
$run -n 2 build/example_all_gather_flat
echo "== Example 2: stacked output, 2 ranks"
$run -n 2 build/example_all_gather_stacked
echo "== Example 3: new_group([0, 1]) out of 4 ranks"
$run -n 4 build/example_all_gather_subgroup
if [ -f build/python/rdmacoll_torch/__init__.py ]; then
  export PYTHONPATH=$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}
  echo "== The same three in Python: torch.distributed with backend=\"rdmacoll\""
  $run -n 2 /usr/bin/python3 examples/python/all_gather_flat.py
  $run -n 2 /usr/bin/python3 examples/python/all_gather_stacked.py
  $run -n 4 /usr/bin/python3 examples/python/all_gather_subgroup.py
fi
echo "== all_gather_into_tensor sweep, 4 local ranks (UCX shared memory)"
$run -n 4 build/all_gather_perf -b 8 -e 16M -f 8 -n 20 -w 5 -c 1 | sed 's/^\[0\] //'
