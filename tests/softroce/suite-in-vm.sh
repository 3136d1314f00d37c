#!/usr/bin/env bash
# Runs inside the SoftRoCE VM (see run-suite.sh): the verbs test list and the seed examples over
# RDMACOLL_TRANSPORT=verbs on rxe0. Exit status: number of failed parts.
set -u
build=${1:?build dir}
cd "$build"
export RDMACOLL_TRANSPORT=verbs RDMACOLL_DEBUG=info RDMACOLL_TIMEOUT_S=120
failed=0
echo "== rdma devices: $(ibv_devinfo -l 2>/dev/null | tr -s '\n' ' ')"
echo "== verbs_tests"
./tests/verbs_tests --gtest_color=no || failed=$((failed + 1))
echo "== gather, scatter, reduce with their descriptors up a tree to the root (4 KiB messages)"
RDMACOLL_DESCRIPTORS=rooted ./tests/verbs_tests --gtest_color=no \
  --gtest_filter='Verbs.GatherScatterReduceAndAllToAll' || failed=$((failed + 1))
echo "== verbs_tests with writes striped over 2 QPs per peer in 64 KiB pieces"
RDMACOLL_IB_QPS_PER_PEER=2 RDMACOLL_IB_CHUNK=65536 ./tests/verbs_tests --gtest_color=no \
  --gtest_filter='*VerbsGroupSize.*:Verbs.PerCallCounters:Verbs.AllReduceSmallAndLarge:Verbs.ReduceScatterAndBroadcast:Verbs.AllReduceRoundsHitTheRegistrationCache' ||
  failed=$((failed + 1))
echo "== verbs_tests with the adaptive-routing data path (plain writes, then a zero-byte immediate)"
RDMACOLL_IB_ADAPTIVE_ROUTING=1 ./tests/verbs_tests --gtest_color=no \
  --gtest_filter='*VerbsGroupSize.*:Verbs.PerCallCounters:Verbs.AllReduceSmallAndLarge:Verbs.ReduceScatterAndBroadcast:VerbsFlowControl.Large*' ||
  failed=$((failed + 1))
echo "== fabric settings: logged at info, overrides honoured, bad ones refused"
out=$(RDMACOLL_IB_TC=106 ./rdmacoll-run -n 2 ./example_all_gather_flat 2>&1)
echo "$out" | grep "verbs: rxe" | head -2
if ! grep -qE "verbs: rxe0:1 GID index [0-9]+ [0-9.]+ \(RoCE v2\), traffic class 106 \(RDMACOLL_IB_TC\), SL 0, P_Key index 0, MTU [0-9]+" <<<"$out"; then
  echo "FAILED: the chosen GID, traffic class and MTU are not logged"
  failed=$((failed + 1))
fi
out=$(RDMACOLL_IB_PKEY=0x1234 ./rdmacoll-run -n 2 ./example_all_gather_flat 2>&1)
if [ $? -eq 0 ] || ! grep -q "P_Key 0x1234 (RDMACOLL_IB_PKEY) is not in rxe0:1's P_Key table" <<<"$out"; then
  echo "$out" | tail -5
  echo "FAILED: an absent P_Key is not refused clearly"
  failed=$((failed + 1))
fi
echo "== seed examples over verbs"
./tests/examples_test --gtest_color=no --gtest_filter='Examples.*' || failed=$((failed + 1))
# Under mpirun the ranks meet through its PMIx server; the QP numbers of a group's first call
# still go through rank 0's store, found through PMIx. RDMACOLL_TRANSPORT=verbs makes a rank
# without verbs an error, not a fallback.
echo "== seed examples over verbs under mpirun (the PMIx bootstrap)"
./tests/examples_test --gtest_color=no --gtest_filter='ExamplesUnderMpirun.*' ||
  failed=$((failed + 1))
if [ -f python/rdmacoll_torch/__init__.py ]; then
  # The torch backend over verbs: the documentation's examples, checked like the C++ ones.
  echo "== python examples over verbs (torch backend)"
  for ex in all_gather_flat:2 all_gather_stacked:2 all_gather_subgroup:3; do
    script=${ex%%:*} n=${ex##*:}
    out=$(PYTHONPATH=python ./rdmacoll-run -n "$n" /usr/bin/python3 \
          "$(dirname "$0")/../../examples/python/$script.py" 2>&1)
    rc=$?
    echo "$out"
    case $script in
      all_gather_flat) want="[0] tensor([1., 2., 2., 3.])" ;;
      all_gather_stacked) want="[1]         [11., 12., 13.]])" ;;
      all_gather_subgroup) want="[1] tensor([  0.,   1., 100., 101.])" ;;
    esac
    if [ $rc -ne 0 ] || ! grep -qF "$want" <<<"$out" || grep -q "transport=ucx" <<<"$out"; then
      echo "FAILED: $script on $n ranks"
      failed=$((failed + 1))
    fi
  done
fi
# Last: a second RDMA device makes unbound ranks spread over two NICs, which the parts above
# must not see.
echo "== two rails in two subnets without a route: the pair is refused at connect"
if ip link add rail1 type dummy && ip link set rail1 up && ip addr add 10.78.0.1/24 dev rail1 &&
  rdma link add rxe1 type rxe netdev rail1; then
  RDMACOLL_TEST_SECOND_RAIL=rxe1 ./tests/verbs_tests --gtest_color=no \
    --gtest_filter='Verbs.APairOnRailsThatCannotReachEachOther*' || failed=$((failed + 1))
else
  echo "FAILED: cannot add a second rxe device"
  failed=$((failed + 1))
fi
echo "== suite-in-vm: $failed part(s) failed"
exit $failed
