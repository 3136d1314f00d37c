"""The torch backend under real launchers and real processes, on the torch of the Python that
RDMACOLL_TEST_PYTHON names (Debian's torch 1.13 with /usr/bin/python3, pip's torch 2.x in the
virtual environment scripts/torch-venv.sh makes): the documentation's examples through
rdmacoll-run and torchrun on 2 and 4 ranks, the cases of cases.py (every op and dtype, subgroups,
async work and futures, gloo's results, errors, one-rank mistakes, a killed rank, exits, re-init,
threads, DDP and ZeroRedundancyOptimizer against gloo) and, on torch 2.x, the workloads of
workloads.py (FSDP2, DDP, DTensor, functional collectives, against gloo).

Run by ctest (python.backend on 1.13, python.backend.torch2 on 2.x); by hand:
    RDMACOLL_RUN=build/rdmacoll-run PYTHONPATH=build/python /usr/bin/python3 -m pytest tests/python
    RDMACOLL_RUN=build/rdmacoll-run RDMACOLL_TEST_PYTHON=.venv/bin/python \
        .venv/bin/python -m pytest tests/python
"""
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLES = os.environ.get("EXAMPLES", os.path.join(ROOT, "examples", "python"))
RUN = os.environ.get("RDMACOLL_RUN", os.path.join(ROOT, "build", "rdmacoll-run"))
# Debian's torch imports only with /usr/bin/python3; pip's torch 2.x lives in a venv.
PYTHON = os.environ.get("RDMACOLL_TEST_PYTHON", "/usr/bin/python3")
TORCH_MAJOR = int(subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"],
                                 capture_output=True, text=True, check=True).stdout.split(".")[0])
torch2 = pytest.mark.skipif(TORCH_MAJOR < 2, reason="needs torch 2.x")
# One OpenMP thread per rank, as torchrun sets: more ranks than cores here.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, timeout=600, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)
    return p.returncode, p.stdout + p.stderr


def launch(n, script, *args, launcher="rdmacoll-run"):
    if launcher == "rdmacoll-run":
        return run([RUN, "-n", str(n), PYTHON, script, *args])
    # torch 1.13 on Python 3.11 needs --redirects 1 --tee 1 (its Std.from_str("0") is None);
    # on 2.x they prefix each line with the rank, as the parser below wants.
    return run([PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", str(n),
                "--master_port", str(free_port()), "--redirects", "1", "--tee", "1",
                script, *args])


def per_rank(output, n):
    """Each rank's printed text, from either launcher's line prefixes. torchrun's tee may print
    a rank's line before its newline has been written, and another rank's line straight after
    it: its "[defaultN]:" prefixes are split on wherever they are."""
    ranks = {r: [] for r in range(n)}
    for line in output.splitlines():
        parts = re.split(r"\[default(\d+)\]:", line)
        if len(parts) > 1:
            for i in range(1, len(parts), 2):
                if int(parts[i]) in ranks:
                    ranks[int(parts[i])].append(parts[i + 1])
            continue
        m = re.match(r"^\[(\d+)\]:? ?(.*)$", line)
        if m and int(m.group(1)) in ranks:
            ranks[int(m.group(1))].append(m.group(2))
    return {r: "\n".join(v) for r, v in ranks.items()}


def numbers(text):
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d*)?", text.split("tensor(", 1)[-1])]


EXAMPLE_CASES = [
    ("all_gather_flat.py", lambda n, r: [v for k in range(n) for v in (k + 1, k + 2)]),
    ("all_gather_stacked.py", lambda n, r: [k * 10 + j for k in range(n) for j in (1, 2, 3)]),
    ("all_gather_subgroup.py", lambda n, r: [0, 1, 100, 101] if r < 2 else None),
]


@pytest.mark.parametrize("launcher", ["rdmacoll-run", "torchrun"])
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("script,expected", EXAMPLE_CASES, ids=[c[0] for c in EXAMPLE_CASES])
def test_documentation_examples(script, expected, n, launcher):
    rc, out = launch(n, os.path.join(EXAMPLES, script), launcher=launcher)
    assert rc == 0, out
    assert "Traceback" not in out and "Error" not in out, out
    texts = per_rank(out, n)
    for r in range(n):
        want = expected(n, r)
        if want is None:
            assert f"rank {r} is not in the group" in texts[r], out
        else:
            assert "tensor(" in texts[r] and numbers(texts[r]) == want, (r, texts[r], out)


SET_TIMEOUT = subprocess.run([PYTHON, "-c", "import torch.distributed as d; "
                              "print(hasattr(d, 'set_timeout'))"],
                             capture_output=True, text=True, check=True).stdout.strip() == "True"
settable = pytest.mark.skipif(not SET_TIMEOUT, reason="this torch has no set_timeout")


@pytest.mark.parametrize("case,n", [("ops", 3), ("subgroups", 4), ("async", 4),
                                    ("gloo_equal", 4), ("errors", 3), ("reinit", 2),
                                    ("threads", 3), ("late", 3), ("ddp", 2), ("ddp", 4),
                                    ("uaf", 2), ("mistakes", 3), ("shapes", 3), ("sparse", 3),
                                    ("secondary", 3), ("teardown", 2), ("profiler", 2),
                                    ("rooted", 3), ("alltoall", 3), ("alltoall", 4),
                                    ("p2p", 2), ("p2p", 3), ("gpipe", 4), ("symmetric", 3),
                                    ("gather_coalesced", 3), ("staging", 3),
                                    pytest.param("dtypes2", 2, marks=torch2),
                                    pytest.param("coalesced", 3, marks=torch2),
                                    pytest.param("premul", 2, marks=torch2),
                                    pytest.param("set_timeout", 2, marks=settable)])
def test_case(case, n):
    rc, out = launch(n, os.path.join(HERE, "cases.py"), case)
    assert rc == 0, out
    for r in range(n):
        assert f"[{r}] ok {case}" in out, out


@torch2
@pytest.mark.parametrize("case,n", [("fsdp2", 2), ("fsdp2", 4), ("fsdp1", 2), ("ddp", 2),
                                    ("ddp", 4), ("ddp_sparse", 2), ("dtensor", 2),
                                    ("dtensor", 4), ("pipeline", 4), ("fsdp2_symmetric", 2),
                                    ("fsdp2_symmetric", 3)])
def test_workload_matches_gloo(case, n):
    rc, out = launch(n, os.path.join(HERE, "workloads.py"), case)
    assert rc == 0, out
    for r in range(n):
        assert f"[{r}] ok {case}" in out, out


def start_by_hand(n, *args):
    """Ranks started without a launcher (a launcher ends the others when one fails)."""
    port = free_port()
    procs = []
    for r in range(n):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   WORLD_SIZE=str(n), LOCAL_RANK=str(r))
        procs.append(subprocess.Popen([PYTHON, os.path.join(HERE, "cases.py"), *args],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=env))
    return procs


@pytest.mark.parametrize("how", ["exception", "sigint", "nodestroy"])
def test_a_rank_that_leaves_makes_the_others_raise_within_two_seconds(how):
    """torch's default 30-minute timeout: the others raise a communication error within 2 s of
    the last rank's exception, Ctrl-C or exit without destroy_process_group, and it exits."""
    n = 3
    procs = start_by_hand(n, "exit", how)
    outs = [p.communicate(timeout=120)[0] for p in procs]
    codes = {"exception": 1, "sigint": -signal.SIGINT, "nodestroy": 0}
    assert procs[n - 1].returncode == codes[how], outs[n - 1]
    left = float(re.search(r"leaving at ([0-9.]+)", outs[n - 1]).group(1))
    for r in range(n - 1):
        assert procs[r].returncode == 0, outs[r]
        m = re.search(r"ok exit: rank \d+ raised at ([0-9.]+)", outs[r])
        assert m, outs[r]
        assert float(m.group(1)) - left < 2.0, (float(m.group(1)) - left, outs[r])


@pytest.mark.parametrize("launcher", ["rdmacoll-run", "torchrun"])
def test_a_rank_that_raises_ends_the_job_under_a_launcher(launcher):
    """Under a launcher the job ends within seconds of one rank's exception, not at the
    timeout: its peers raise, or the launcher ends them once that rank has exited."""
    start = time.time()
    rc, out = launch(3, os.path.join(HERE, "cases.py"), "exit", "exception", launcher=launcher)
    ended = time.time()
    assert rc != 0, out
    left = float(re.search(r"leaving at ([0-9.]+)", out).group(1))
    assert ended - left < 10.0, (ended - left, out)
    assert left > start


def test_store_wait_that_times_out_leaves_torchs_store_usable():
    """torch 1.13's TCPStore answers a timed-out wait later, on the same connection; the
    backend's store adapter must not wait that way (see TorchStore::get)."""
    import datetime
    import torch.distributed as dist
    import rdmacoll_torch
    server = dist.TCPStore("127.0.0.1", 0, 2, True, timeout=datetime.timedelta(seconds=30),
                           wait_for_workers=False)
    client = dist.TCPStore("127.0.0.1", server.port, 2, False,
                           timeout=datetime.timedelta(seconds=30))
    with pytest.raises(RuntimeError, match="timed out after 100 ms waiting for key 'k'"):
        rdmacoll_torch._C._store_get(client, "k", datetime.timedelta(milliseconds=100))
    server.set("k", "v")
    # "k", and on torch 1.13 the store's own worker count: the reply is the count, not a
    # late answer to the timed-out wait.
    assert client.num_keys() in (1, 2)
    assert rdmacoll_torch._C._store_get(client, "k", datetime.timedelta(seconds=5)) == b"v"
    assert client.get("k") == b"v"


SHRINK = subprocess.run([PYTHON, "-c", "import torch.distributed as d; "
                         "print(hasattr(d, 'shrink_group'))"],
                        capture_output=True, text=True, check=True).stdout.strip() == "True"
shrinkable = pytest.mark.skipif(not SHRINK, reason="this torch has no shrink_group")


@pytest.mark.parametrize("case,n", [("killed", 3), ("p2p_killed", 3),
                                    pytest.param("shrink", 4, marks=shrinkable),
                                    pytest.param("ddp_shrink", 4, marks=shrinkable),
                                    pytest.param("fsdp2_shrink", 4, marks=shrinkable)])
def test_killed_rank_makes_the_others_raise(case, n):
    """Started by hand (rdmacoll-run would end the survivors as soon as one rank dies); the
    last rank dies (the shrink cases: rank 2)."""
    port = free_port()
    procs = []
    for r in range(n):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   WORLD_SIZE=str(n), LOCAL_RANK=str(r))
        procs.append(subprocess.Popen([PYTHON, os.path.join(HERE, "cases.py"), case],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=env))
    outs = [p.communicate(timeout=120)[0] for p in procs]
    victim = 2 if "shrink" in case else n - 1
    assert procs[victim].returncode == -signal.SIGKILL, outs[victim]
    for r in range(n):
        if r == victim:
            continue
        assert procs[r].returncode == 0, outs[r]
        assert f"ok {case}: rank" in outs[r], outs[r]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
