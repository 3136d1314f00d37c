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
echo "== seed examples over verbs"
./tests/examples_test --gtest_color=no --gtest_filter='Examples.*' || failed=$((failed + 1))
echo "== suite-in-vm: $failed part(s) failed"
exit $failed
