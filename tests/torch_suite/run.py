"""torch's own distributed test suite (torch/testing/_internal/distributed/distributed_test.py,
shipped in the wheel) against a backend, driven as torch's test/distributed/
test_distributed_spawn.py drives it: each test spawns WORLD_SIZE processes that rendezvous
through a file and run it on BACKEND. Prints passed / skipped / failed counts and writes every
test's outcome to --out.

    BACKEND=rdmacoll .venv/bin/python tests/torch_suite/run.py --out /tmp/rdmacoll.txt
    BACKEND=gloo .venv/bin/python tests/torch_suite/run.py --out /tmp/gloo.txt

torch's test helpers need `expecttest` and `hypothesis` in the venv (`pip install expecttest
hypothesis`). Not part of ctest (it takes tens of minutes per backend on two cores); docs/torch.md gives the
counts and the reason for each failure that is not ours.
"""
import argparse
import os
import sys
import tempfile
import time
import unittest

# Read by distributed_test.py at import, here and in every spawned child (which imports this
# module again): the environment carries them.
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("OMP_NUM_THREADS", "1")
if "TEMP_DIR" not in os.environ:
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="torch_suite_")

import torch  # noqa: E402,F401
if os.environ.get("BACKEND") == "rdmacoll":
    # Registers "rdmacoll" (here and in the children); a gloo run does not load it, so it counts
    # torch alone and is not disturbed by a reinstall of the backend.
    import rdmacoll_torch  # noqa: E402,F401
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("-k", default=None, help="run only tests whose name contains this")
    args = ap.parse_args()
    backend = os.environ["BACKEND"]
    suite = unittest.TestLoader().loadTestsFromTestCase(TestDistBackendWithSpawn)
    tests = [t for t in _flatten(suite) if not args.k or args.k in t.id()]
    outcomes = []
    start = time.time()
    for t in tests:
        result = unittest.TestResult()
        t0 = time.time()
        t.run(result)
        took = time.time() - t0
        name = t.id().rsplit(".", 1)[-1]
        if result.errors or result.failures:
            # The last line of the traceback that says what failed, not torch's repro footer.
            lines = (result.errors + result.failures)[0][1].strip().splitlines()
            said = [ln for ln in lines if ln.strip() and "PYTORCH_PRINT_REPRO" not in ln
                    and not ln.startswith(("To execute this test", "    python "))]
            why = said[-1] if said else lines[-1]
            outcomes.append((name, "failed", took, why[:300]))
        elif result.skipped:
            outcomes.append((name, "skipped", took, result.skipped[0][1][:200]))
        else:
            outcomes.append((name, "passed", took, ""))
        print(f"{outcomes[-1][1]:8} {took:6.1f}s {name} {outcomes[-1][3]}", flush=True)
    counts = {k: sum(1 for o in outcomes if o[1] == k) for k in ("passed", "skipped", "failed")}
    with open(args.out, "w") as f:
        for name, outcome, took, why in outcomes:
            f.write(f"{outcome}\t{took:.1f}\t{name}\t{why}\n")
    print(f"{backend}: {counts['passed']} passed, {counts['skipped']} skipped, "
          f"{counts['failed']} failed of {len(outcomes)} in {time.time() - start:.0f} s")


def _flatten(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from _flatten(t)
        else:
            yield t


if __name__ == "__main__":
    sys.exit(main())
