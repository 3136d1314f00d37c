#!/usr/bin/python3
"""Side-by-side comparison of one collective: rdmacoll against Open MPI, MPICH, oneCCL (with
--oneccl), torch/gloo and the memcpy limit, measured in one run on one machine.

Systems are interleaved size by size (every system measures size S before any measures the
next size), and the whole sweep repeats in rounds, so they share the machine's noise; each
figure is the best of its clean rounds, each ratio printed with its spread across rounds, and a
run where something else was busy is marked not for publishing (method.py says how).

  /usr/bin/python3 perf/compare/compare.py [--build build] [--out DIR] [--worlds 2,4]
      [--oneccl PREFIX]
      [--min 8] [--max 64M] [--factor 4] [--extra 1M] [--rounds 3] [--smoke | --quick]
      [--systems rdmacoll-shm,ompi-shm,...]
      [--collective all_gather|all_reduce|reduce_scatter|broadcast|sendrecv|reduce|alltoall|
                    gather|scatter]

Writes DIR/compare.csv, DIR/compare.md (rdmacoll's time over each peer's per size, < 1 means
rdmacoll is faster, with the spread; each system's best time), DIR/LOADED when the machine was
not quiet and DIR/busbw.png (busbw vs size, one panel per world size
and transport family). Run as root on Debian 12 with openmpi-bin, mpich, python3-torch and
python3-matplotlib installed (scripts/install-deps.sh).
"""
import argparse
import csv
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from method import (RUN_BUDGET_S, Pace, Samples, iterations, others_busy,  # noqa: E402
                    ratio_cell, warmups)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip()
    if text[-1].upper() in mult:
        return int(float(text[:-1]) * mult[text[-1].upper()])
    return int(text)


def human(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def has_verbs():
    try:
        out = subprocess.run(["ibv_devinfo"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "PORT_ACTIVE" in out


class System:
    """One contender: how to run it for a world size and a size, and its family/peer."""

    def __init__(self, name, family, command, env=None, label=None):
        self.name, self.family, self.command = name, family, command
        self.env = env or {}
        self.label = label or name


def build_helpers(outdir, oneccl=None):
    """Compiles the MPI program against each MPI, the oneCCL program against the oneCCL under
    the prefix `oneccl` (scripts/oneccl-prefix.sh makes one from PyPI), and the memcpy probe."""
    bindir = os.path.join(outdir, "bin")
    os.makedirs(bindir, exist_ok=True)
    built = {}
    if oneccl:
        exe = os.path.join(bindir, "ccl_allgather")
        lib = os.path.join(oneccl, "lib")
        subprocess.run(["c++", "-O2", "-std=c++17", "-I", os.path.join(oneccl, "include"), "-o",
                        exe, os.path.join(HERE, "ccl_allgather.cpp"), "-L", lib, "-lccl",
                        f"-Wl,-rpath,{lib}"], check=True)
        built["oneccl"] = (exe, lib)
    for mpi, cc in (("openmpi", "mpicc.openmpi"), ("mpich", "mpicc.mpich")):
        if shutil.which(cc):
            exe = os.path.join(bindir, f"mpi_allgather_{mpi}")
            subprocess.run([cc, "-O2", "-o", exe, os.path.join(HERE, "mpi_allgather.c")], check=True)
            built[mpi] = exe
    if "openmpi" in built:
        built["ompi_cma"] = openmpi_cma_works(built["openmpi"])
    exe = os.path.join(bindir, "memcpy_bw")
    subprocess.run(["cc", "-O2", "-o", exe, os.path.join(HERE, "memcpy_bw.c")], check=True)
    built["memcpy"] = exe
    return built


def openmpi_cma_works(exe):
    """Whether Open MPI's vader can use its CMA single copy here (process_vm_readv needs ptrace
    rights, which some containers lack, and then vader aborts the job). Where it can, the peer is
    Open MPI as users run it; forcing the single copy off would slow it 2.4x at 64 KiB and 1.4x
    at 1 MiB on this machine and flatter every ratio."""
    cmd = ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
           "-np", "2", exe, "65536", "20", "2"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0 and "RESULT 65536" in proc.stdout


# Per collective: all_gather_perf's -o, the MPI helper's mode, the gloo helper's mode (None:
# gloo lacks it), the bytes one rank must move (the memcpy limit) and nccl-tests' busbw factor
# (busbw = size / time x factor; size is bytes per rank for the all-gather, the tensor's bytes
# for all_reduce and broadcast, the input's bytes (p x the output) for reduce_scatter).
COLLECTIVES = {
    "all_gather": ([], [], [], lambda w, s: s * (w - 1), lambda w: w - 1,
                   "torch 1.13 gloo (all_gather into views)", "(p-1) x size"),
    "all_reduce": (["-o", "all_reduce"], ["allreduce"], ["allreduce"],
                   lambda w, s: 2 * s * (w - 1) // w, lambda w: 2 * (w - 1) / w,
                   "torch 1.13 gloo (all_reduce)", "2(p-1)/p x size"),
    "reduce_scatter": (["-o", "reduce_scatter"], ["reducescatter"], None,
                       lambda w, s: s * (w - 1) // w, lambda w: (w - 1) / w, None,
                       "(p-1)/p x size"),
    "broadcast": (["-o", "broadcast"], ["bcast"], ["broadcast"], lambda w, s: s, lambda w: 1,
                  "torch 1.13 gloo (broadcast)", "size"),
    # Issue 24's calls. sendrecv: size is the message; reduce: the tensor (root 0); alltoall:
    # one rank's whole input (p pieces); gather, scatter: the root's whole tensor (p pieces).
    "sendrecv": (["-o", "sendrecv"], ["sendrecv"], ["sendrecv"], lambda w, s: s, lambda w: 1,
                 "torch 1.13 gloo (batch_isend_irecv)", "size"),
    "reduce": (["-o", "reduce"], ["reduce"], ["reduce"], lambda w, s: s * (w - 1),
               lambda w: 1, "torch 1.13 gloo (reduce)", "(p-1) x size"),
    "alltoall": (["-o", "alltoall"], ["alltoall"], ["alltoall"],
                 lambda w, s: s * (w - 1) // w, lambda w: (w - 1) / w,
                 "torch 1.13 gloo (all_to_all_single)", "(p-1)/p x size"),
    "gather": (["-o", "gather"], ["gather"], ["gather"], lambda w, s: s * (w - 1) // w,
               lambda w: (w - 1) / w, "torch 1.13 gloo (gather)", "(p-1)/p x size"),
    "scatter": (["-o", "scatter"], ["scatter"], ["scatter"], lambda w, s: s * (w - 1) // w,
                lambda w: (w - 1) / w, "torch 1.13 gloo (scatter)", "(p-1)/p x size"),
}
# A second MPI call timed against the same rdmacoll row: torch's uneven all_to_all_single is
# MPI_Alltoallv.
EXTRA_MPI = {"alltoall": ("alltoallv", "MPI_Alltoallv")}
# The torch helper's mode for rdmacoll's torch backend (it has every call gloo lacks).
TORCH_MODES = {"all_gather": [], "all_reduce": ["allreduce"], "reduce_scatter": ["reducescatter"],
               "broadcast": ["broadcast"], "sendrecv": ["sendrecv"], "reduce": ["reduce"],
               "alltoall": ["alltoall"], "gather": ["gather"], "scatter": ["scatter"]}


# The collectives ccl_allgather.cpp times, and its mode for each.
ONECCL_MODES = {"all_gather": [], "all_reduce": ["allreduce"], "reduce_scatter": ["reducescatter"],
                "broadcast": ["broadcast"]}


def torch_version(python):
    out = subprocess.run([python, "-c", "import torch; print(torch.__version__.split('+')[0])"],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def systems(build, helpers, collective, torch_python="/usr/bin/python3", only=None):
    """The contenders for `collective`: rdmacoll's call against the MPI implementations' (over
    shared memory and TCP), torch's gloo where it has the call, and the memcpy limit. The torch
    rows run on `torch_python`'s torch (Debian's 1.13 by default; a venv's 2.x with
    --torch-python). `only` ("torch"): rdmacoll's C++ binary, the torch rows and memcpy."""
    op, mode, gloo_mode, moved, _, gloo_label, moved_label = COLLECTIVES[collective]
    tv = torch_version(torch_python) or "?"
    torch2 = not tv.startswith("1.")
    if torch2:
        # torch 2.x's gloo has every one of these calls (all_gather_into_tensor included).
        gloo_mode = TORCH_MODES[collective]
        gloo_label = f"torch {tv} gloo"
    run = os.path.join(build, "rdmacoll-run")
    perf = os.path.join(build, "all_gather_perf")
    rdm = lambda w, s, it: [run, "-n", str(w), perf, "-b", str(s), "-e", str(s), "-n", str(it),
                            "-w", str(warmups(it)), "-c", "1"] + op
    out = [System("rdmacoll-shm", "shm", rdm, label="rdmacoll (UCX shm)")]
    if collective in ("all_gather", "all_reduce", "reduce_scatter", "broadcast") and \
            only != "torch":
        # The tensors from rdmacoll::empty: one-copy stores into (or loads from) every member's.
        out.append(System("rdmacoll-symmetric", "shm", lambda w, s, it: rdm(w, s, it) + ["-S"],
                          label="rdmacoll (output in symmetric memory)"))
    if only != "torch":
        out.append(System("rdmacoll-tcp", "tcp", rdm, {"UCX_TLS": "tcp"},
                          label="rdmacoll (UCX_TLS=tcp)"))
    if has_verbs() and only != "torch":
        out.append(System("rdmacoll-verbs", "verbs", rdm, {"RDMACOLL_TRANSPORT": "verbs"},
                          label="rdmacoll (verbs)"))
    if "openmpi" in helpers and only != "torch":
        ompi = ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
        vader = "vader with CMA single copy" if helpers["ompi_cma"] else \
            "vader, single copy off: CMA not permitted here"
        if not helpers["ompi_cma"]:
            ompi += ["--mca", "btl_vader_single_copy_mechanism", "none"]
        exe = helpers["openmpi"]
        # Default arguments bind now: `exe` is reassigned below (late binding would hand
        # MPICH's binary to Open MPI's mpirun).
        out.append(System("ompi-shm", "shm",
                          lambda w, s, it, exe=exe: ompi + ["-np", str(w), exe, str(s), str(it),
                                                            str(warmups(it))] + mode,
                          label=f"Open MPI 4.1.4 (default: {vader})"))
        out.append(System("ompi-tcp", "tcp",
                          lambda w, s, it, exe=exe: ompi + ["--mca", "pml", "ob1", "--mca", "btl",
                                                   "tcp,self", "-np", str(w), exe, str(s),
                                                   str(it), str(warmups(it))] + mode,
                          label="Open MPI 4.1.4 (btl tcp,self)"))
        if collective in EXTRA_MPI:
            xmode, xlabel = EXTRA_MPI[collective]
            out.append(System(f"ompi-{xmode}", "shm",
                              lambda w, s, it, exe=exe: ompi + ["-np", str(w), exe, str(s),
                                                                str(it), str(warmups(it)), xmode],
                              label=f"Open MPI 4.1.4 ({vader}, {xlabel})"))
    if "oneccl" in helpers and collective in ONECCL_MODES and only != "torch":
        exe, lib = helpers["oneccl"]
        # Its worker threads spin by default: with 2 ranks on 2 cores that took 7-10 ms per
        # call, so they yield, as ours do; shared memory on one host (its ATL_SHM).
        cenv = {"LD_LIBRARY_PATH": lib, "CCL_ATL_TRANSPORT": "ofi", "CCL_ATL_SHM": "1",
                "CCL_YIELD": "sched_yield", "CCL_PROCESS_LAUNCHER": "none"}
        # Rank 0 hands its KVS address to the others through a file, one per run: a file named
        # after the launcher's port outlived its run, and a later run on the same port read the
        # stale address and hung until the timeout.
        kvs = itertools.count()
        kvs_dir = os.path.dirname(exe)

        def ccl(w, s, it, exe=exe):
            path = os.path.join(kvs_dir, f"kvs-{os.getpid()}-{next(kvs)}")
            return ["env", f"CCL_KVS_FILE={path}", run, "-n", str(w), exe, str(s), str(it),
                    str(warmups(it))] + ONECCL_MODES[collective]
        out.append(System("oneccl", "shm", ccl, cenv, label="oneCCL 2022.2 (ofi, ATL shm)"))
    if "mpich" in helpers and only != "torch":
        exe = helpers["mpich"]
        out.append(System("mpich", "shm",
                          lambda w, s, it, exe=exe: ["mpirun.mpich", "-np", str(w), exe, str(s),
                                                     str(it), str(warmups(it))] + mode,
                          label="MPICH 4.0.2"))
    # rdmacoll's torch backend, timed like gloo (same script, same loop): the Python layer's
    # cost over all_gather_perf, and the ratio against gloo, in one run.
    # With torch 1.13 the module is the build's; a venv's torch 2.x has it installed.
    pydir = os.path.join(build, "python")
    env = {"TORCH_BACKEND": "rdmacoll", "OMP_NUM_THREADS": "1"}
    if not torch2:
        env["PYTHONPATH"] = pydir
    if torch2 or os.path.isfile(os.path.join(pydir, "rdmacoll_torch", "__init__.py")):
        out.append(System("torch-rdmacoll", "torch",
                          lambda w, s, it: [run, "-n", str(w), torch_python,
                                            os.path.join(HERE, "gloo_allgather.py"), str(s),
                                            str(it), "1"] + TORCH_MODES[collective],
                          env, label=f"torch {tv} + rdmacoll (UCX shm)"))
    if gloo_mode is not None:
        # Against torch + rdmacoll where that runs (the same Python loop), else rdmacoll over TCP.
        torch_ours = any(c.name == "torch-rdmacoll" for c in out)
        out.append(System("gloo", "torch-peer" if torch_ours else "tcp",
                          lambda w, s, it: [run, "-n", str(w), torch_python,
                                            os.path.join(HERE, "gloo_allgather.py"), str(s),
                                            str(it), "1"] + gloo_mode,
                          {"OMP_NUM_THREADS": "1"}, label=gloo_label))
    memcpy = helpers["memcpy"]
    out.append(System("memcpy", "limit",
                      lambda w, s, it, memcpy=memcpy: [memcpy, str(moved(w, s)), str(it)],
                      label=f"memcpy limit (1 thread, {moved_label})"))
    return out


def run_one(system, world, nbytes, timeout, reduce=False, it=None):
    it = it or iterations(nbytes, world)
    env = dict(os.environ)
    env.update(system.env)
    # In its own session, so that a timeout kills every rank: killing only the launcher left a
    # hung oneCCL job's ranks behind, holding memory for the rest of the sweep.
    proc = subprocess.Popen(system.command(world, nbytes, it), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        text = out + err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None, "timeout"
    us, wrong = None, None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[0] "):
            line = line[4:].strip()
        if line.startswith("RESULT"):
            fields = line.split()
            us, wrong = float(fields[2]), int(fields[3])
            if len(fields) > 4 and int(fields[4]) != world:  # e.g. a launcher/MPI mismatch
                return None, f"ran as {fields[4]} ranks, not {world}"
        elif system.name.startswith("rdmacoll") and line and line[0].isdigit():
            f = line.split()  # all_reduce rows have a redop column after the type
            us, wrong = (float(f[4]), int(f[7])) if reduce else (float(f[3]), int(f[6]))
    if us is None:
        return None, f"no result (exit {proc.returncode}): {text[-300:]!r}"
    if wrong:
        return None, f"{wrong} wrong elements"
    return us, ""


def busbw(world, nbytes, us, name, collective="all_gather"):
    """nccl-tests' bus bandwidth (COLLECTIVES' factor x size / time); the memcpy limit moves
    exactly those bytes."""
    if us is None or us <= 0:
        return None
    return nbytes * COLLECTIVES[collective][4](world) / us / 1e3


# The rdmacoll row each family's peers are compared with, and what it is called in a header.
OURS = {"shm": ["rdmacoll-shm", "rdmacoll-symmetric"], "tcp": ["rdmacoll-tcp"],
        "torch-peer": ["torch-rdmacoll"]}


def ratio_table(samples, worlds, sizes, names, families, collective):
    """Markdown: rdmacoll's best time over each peer's of its family (< 1: rdmacoll faster),
    with the per-round ratios' spread."""
    pairs = [(ours, them) for them in names if not them.startswith(("rdmacoll", "torch-rd"))
             for ours in OURS.get(families[them], []) if ours in names]
    if not pairs:
        return []
    md = []
    for world in worlds:
        md += [f"## {collective}, {world} ranks: rdmacoll's time over the peer's", "",
               "Best clean round over best clean round (< 1: rdmacoll is faster); in "
               "parentheses the lowest and highest of the same rounds' ratios.", "",
               "| size | " + " | ".join(f"{o} / {t}" for o, t in pairs) + " |",
               "|---|" + "---|" * len(pairs)]
        for nbytes in sizes:
            md.append(f"| {human(nbytes)} | " + " | ".join(
                ratio_cell(samples.ratio(world, nbytes, o, t)) for o, t in pairs) + " |")
        md.append("")
    return md


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--min", default="8")
    ap.add_argument("--max", default="64M")
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument("--extra", default="1M",
                    help="sizes measured besides the sweep, comma-separated (the 1 MiB target)")
    ap.add_argument("--blocks", "--rounds", dest="blocks", type=int, default=None,
                    help="rounds of the whole sweep, each figure the best of its clean rounds (default 3; "
                         "5 with --quick)")
    ap.add_argument("--systems", default=None,
                    help="comma-separated system names to run (default: every one that runs here)")
    ap.add_argument("--quick", action="store_true",
                    help="2 ranks, 8 B to 16 MiB, rdmacoll (ordinary and symmetric output) against "
                         "Open MPI, 3 rounds: the ratio table in under 3 minutes")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per single run")
    ap.add_argument("--smoke", action="store_true", help="tiny sweep for CI: 8 B..4 KiB, 1 block")
    ap.add_argument("--torch-python", default="/usr/bin/python3",
                    help="the Python whose torch the torch rows run on (Debian's 1.13 by "
                         "default; .venv/bin/python for pip's 2.x)")
    ap.add_argument("--only", choices=("torch",), default=None,
                    help="torch: rdmacoll's C++ binary, the torch rows and memcpy only")
    ap.add_argument("--oneccl", default=os.environ.get("RDMACOLL_ONECCL"),
                    help="a prefix with oneCCL's include/ and lib/ (scripts/oneccl-prefix.sh): "
                         "adds its row for all_gather, all_reduce, reduce_scatter and broadcast")
    ap.add_argument("--collective", choices=tuple(COLLECTIVES), default="all_gather",
                    help="all_gather (default; files compare.*, busbw.png), or all_reduce, "
                         "reduce_scatter, reduce (float32 SUM), broadcast, sendrecv, alltoall, "
                         "gather, scatter (files compare_<name>.*, busbw_<name>.png)")
    args = ap.parse_args()
    single = args.collective != "all_gather"  # one column set: a redop column in the rows
    stem = f"compare_{args.collective}" if single else "compare"
    plot_name = f"busbw_{args.collective}.png" if single else "busbw.png"
    if args.smoke:
        args.min, args.max, args.factor, args.blocks, args.worlds = "8", "4K", 512, 1, "2"
        args.extra = ""
    if args.blocks is None:
        args.blocks = 5 if args.quick else 3
    if args.quick:
        args.min, args.max, args.factor, args.worlds = "8", "16M", 8, "2"
        args.extra = "64K,128K,256K,1M"
        args.systems = args.systems or "rdmacoll-shm,rdmacoll-symmetric,ompi-shm"
    out = args.out or os.path.join(ROOT, "perf", "results", time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    helpers = build_helpers(out, args.oneccl)
    contenders = systems(os.path.abspath(args.build), helpers, args.collective,
                         args.torch_python, args.only)
    if args.systems:
        wanted = args.systems.split(",")
        contenders = [c for c in contenders if c.name in wanted]
    worlds = [int(w) for w in args.worlds.split(",")]
    sizes, s = [], parse_size(args.min)
    while s <= parse_size(args.max):
        sizes.append(s)
        s *= args.factor
    if sizes[-1] != parse_size(args.max):
        sizes.append(parse_size(args.max))  # the sweep always ends at --max
    extra = [parse_size(x) for x in args.extra.split(",") if x.strip()]
    sizes = sorted(set(sizes + [x for x in extra if x <= parse_size(args.max)]))
    started = time.time()
    rows = []  # (round, world, size, system, us, calls, busy, note)
    samples = Samples()
    pace = Pace()
    failures = []
    for block in range(args.blocks):
        for world in worlds:
            for nbytes in sizes:
                busy = others_busy()  # nothing of ours runs now
                samples.add_busy(block, world, nbytes, busy)
                for sysm in contenders:
                    if pace.unknown(sysm.name, world):
                        # Its first run: 10 calls, not recorded, only so that this run fits the
                        # budget too.
                        pace.add(sysm.name, world, nbytes,
                                 run_one(sysm, world, nbytes, args.timeout, single, 10)[0])
                    it = iterations(nbytes, world, pace.get(sysm.name, world, nbytes))
                    us, note = run_one(sysm, world, nbytes, args.timeout, single, it)
                    pace.add(sysm.name, world, nbytes, us)
                    samples.add(block, world, nbytes, sysm.name, us)
                    rows.append((block, world, nbytes, sysm.name, us, it, busy, note))
                    if note:
                        failures.append(f"{sysm.name} p={world} {human(nbytes)}: {note}")
                    if sys.stderr.isatty():
                        print(f"\rround {block + 1}/{args.blocks} p={world} {human(nbytes):>8} "
                              f"{sysm.name:<18}", end="", file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    elapsed = time.time() - started
    loaded, sampled = samples.loaded_count()

    with open(os.path.join(out, stem + ".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "world", "bytes_per_rank", "system", "time_us", "calls",
                    "busbw_GBps", "others_busy_cores", "note"])
        for block, world, nbytes, name, us, it, busy, note in rows:
            bw = busbw(world, nbytes, us, name, args.collective)
            w.writerow([block, world, nbytes, name, "" if us is None else f"{us:.3f}", it,
                        "" if bw is None else f"{bw:.4f}", f"{busy:.2f}", note])

    names = [c.name for c in contenders]
    labels = {c.name: c.label for c in contenders}
    families = {c.name: c.family for c in contenders}
    best = {}
    for world in worlds:
        for nbytes in sizes:
            for name in names:
                t, _ = samples.best(world, nbytes, name)
                if t is not None:
                    best[(world, nbytes, name)] = t
    quiet = (f"Something else kept more than 0.2 cores busy before {loaded} of {sampled} "
             f"size-rounds: those rounds are left out where a clean one exists (a dagger marks "
             f"a figure that needed one). NOT FOR PUBLISHING." if loaded else
             f"Every one of the {sampled} size-rounds started on a quiet machine (under 0.2 "
             f"cores busy with anything else).")
    ratio_md = ratio_table(samples, worlds, sizes, names, families, args.collective)
    md = [f"# {args.collective} comparison ({time.strftime('%Y-%m-%d %H:%M')}, "
          f"{os.uname().nodename}, {os.cpu_count()} cores)", "",
          f"{quiet} Method: perf/compare/method.py; {args.blocks} rounds, every system run "
          f"size by size in each round, back to back as nccl-tests times (mean us per call of "
          f"the slowest rank; at most about {RUN_BUDGET_S:.0f} s of calls per run, the count "
          f"in the csv); the sweep took {elapsed:.0f} s.", ""]
    notes = {
        "all_reduce": "all_reduce: size is the tensor's bytes (float32), reduced in place with "
                      "SUM; busbw = 2 (p-1)/p x size / time, as in nccl-tests.",
        "reduce_scatter": "reduce_scatter: size is the input's bytes (float32, p x the output), "
                          "reduced with SUM (MPI_Reduce_scatter_block); busbw = (p-1)/p x size / "
                          "time, as in nccl-tests. torch 1.13's gloo has no reduce_scatter.",
        "broadcast": "broadcast: size is the tensor's bytes, from rank 0 (MPI_Bcast); busbw = "
                     "size / time, as in nccl-tests.",
        "sendrecv": "sendrecv: size is the message's bytes (float32); every rank sends to rank+1 "
                    "and receives from rank-1 at once (batch_isend_irecv; MPI_Sendrecv); busbw "
                    "= size / time, as in nccl-tests.",
        "reduce": "reduce: size is the tensor's bytes (float32, SUM to rank 0, MPI_Reduce); "
                  "busbw = size / time, as in nccl-tests.",
        "alltoall": "alltoall: size is one rank's whole input (p float32 pieces; "
                    "all_to_all_single with equal splits; MPI_Alltoall and MPI_Alltoallv); busbw "
                    "= (p-1)/p x size / time, as in nccl-tests.",
        "gather": "gather: size is the root's whole output (p float32 pieces, to rank 0; "
                  "MPI_Gather); busbw = (p-1)/p x size / time, as in nccl-tests.",
        "scatter": "scatter: size is the root's whole input (p float32 pieces, from rank 0; "
                   "MPI_Scatter); busbw = (p-1)/p x size / time, as in nccl-tests.",
    }
    if args.collective in notes:
        md += [notes[args.collective] + " The memcpy limit copies the bytes one rank must move "
               "once.", ""]
    for c in contenders:
        md.append(f"- `{c.name}`: {c.label}")
    md.append("")
    md += ratio_md
    for world in worlds:
        md += [f"## Times, {world} ranks (best clean round, us)", "",
               "| size | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for nbytes in sizes:
            cells = [f"{best[(world, nbytes, n)]:.1f}" if (world, nbytes, n) in best else "-"
                     for n in names]
            md.append(f"| {human(nbytes)} | " + " | ".join(cells) + " |")
        md.append("")
    if failures:
        md.append("## Runs without a result")
        md.extend(f"- {f}" for f in failures)
        md.append("")
    md.append(f"Every run's time and the busy-core sample before it: {stem}.csv.")
    with open(os.path.join(out, stem + ".md"), "w") as f:
        f.write("\n".join(md) + "\n")

    try:
        from plot import save_busbw_plot

        panels = []
        for world in worlds:
            for fam, title in (("shm", "shared memory (one host)"), ("tcp", "TCP")):
                series = []
                for name in names:
                    if families[name] not in (fam, "limit") and not (
                            fam == "shm" and families[name] in ("verbs", "torch")) and not (
                            fam == "tcp" and families[name] == "torch-peer"):
                        continue
                    xs = [n for n in sizes if (world, n, name) in best]
                    ys = [busbw(world, n, best[(world, n, name)], name, args.collective)
                          for n in xs]
                    series.append((labels[name], xs, ys, name.startswith("rdmacoll")))
                if series:
                    panels.append((f"{world} ranks, {title}", series))
        save_busbw_plot(os.path.join(out, plot_name), panels)
    except ImportError:
        print("matplotlib missing: no plot (apt-get install python3-matplotlib)", file=sys.stderr)

    if loaded:
        with open(os.path.join(out, "LOADED"), "w") as f:
            f.write(quiet + "\n")
    if args.quick:
        print("\n".join(ratio_md) + quiet)
    print(f"wrote {out}/{stem}.csv, {stem}.md, {plot_name} ({elapsed:.0f} s)")
    if failures:
        print("runs without a result:\n  " + "\n  ".join(failures), file=sys.stderr)
    # A failed rdmacoll run is an error; a peer that cannot run here is only reported.
    return 1 if any(f.startswith("rdmacoll") for f in failures) else 0


if __name__ == "__main__":
    sys.exit(main())
