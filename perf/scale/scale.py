#!/usr/bin/env python3
"""Scaling benchmark: all_gather_into_tensor against Open MPI's MPI_Allgather as the group grows,
every rank its own host (RDMACOLL_HOST_ID) over TCP on this machine (UCX_TLS=tcp; Open MPI's
btl tcp,self), so every descriptor travels as a message, as it would across hosts.

    /usr/bin/python3 perf/scale/scale.py [--build build] [--out docs/perf] [--ranks 2,4,8,16,32]
                                         [--sizes 8,64K] [--blocks 5]

For each p and size the two systems run interleaved, best of --blocks. Reported per p: the time
per call (back-to-back calls over their count, the slowest rank's, as nccl-tests and OSU time),
and rdmacoll's control messages per rank per call (the transport's counter around the timed
calls; the most any rank sent) against the target 2 ceil(log2 p), and the peers a rank has
connected to by the end (UCX opens endpoints on first use), against p - 1. Every element of every
rank's output is checked. Writes scale.md, scale.csv and scale.png (python3-matplotlib) to
--out. With more ranks than cores every rank still makes progress (waits block), but absolute
times grow with oversubscription for both systems alike.
"""
import argparse
import csv
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "perf", "compare"))
from compare import build_helpers, human, parse_size  # noqa: E402


def iterations(nbytes, p):
    """Enough back-to-back calls to time, few enough that 32 ranks on 2 cores finish."""
    return max(10, (2000 if nbytes <= 4096 else 400) // p)


def run(cmd, env, timeout):
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "timeout"
    text = proc.stdout + proc.stderr
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[0] "):
            line = line[4:].strip()
        if line.startswith("RESULT"):
            f = line.split()
            if int(float(f[3])) != 0:
                return None, f"{f[3]} wrong elements"
            # us, wrong, ranks[, ctrl max, ctrl mean, connected peers max]
            return [float(x) for x in f[2:]], ""
    return None, f"no result (exit {proc.returncode}): {text[-300:]!r}"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "perf"))
    ap.add_argument("--ranks", default="2,4,8,16,32")
    ap.add_argument("--sizes", default="8,64K")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=120)
    args = ap.parse_args()
    start = time.time()
    ranks = [int(x) for x in args.ranks.split(",")]
    sizes = [parse_size(x) for x in args.sizes.split(",")]
    os.makedirs(args.out, exist_ok=True)
    helpers = build_helpers(tempfile.mkdtemp(prefix="rdmacoll-scale-"))
    if "openmpi" not in helpers:
        sys.exit("scale: needs Open MPI (mpicc.openmpi)")
    launcher = os.path.join(args.build, "rdmacoll-run")
    rank_bin = os.path.join(args.build, "scale_allgather")
    env = dict(os.environ, UCX_TLS="tcp", UCX_NET_DEVICES="lo", UCX_WARN_UNUSED_ENV_VARS="n",
               RDMACOLL_TIMEOUT_S="60")
    env.pop("RDMACOLL_TRANSPORT", None)

    def rdmacoll(p, nbytes, it):
        # Every rank its own host: descriptors travel as messages, as across hosts.
        return [launcher, "-n", str(p), "bash", "-c",
                'RDMACOLL_HOST_ID="host$RANK" exec "$0" "$@"', rank_bin, str(nbytes), str(it),
                "3"]

    def ompi(p, nbytes, it):
        return ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                "--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include",
                "lo", "-np", str(p), helpers["openmpi"], str(nbytes), str(it), "3"]

    rows = []
    for p in ranks:
        for nbytes in sizes:
            it = iterations(nbytes, p)
            best = {"rdmacoll": None, "ompi": None}
            ctrl = None
            peers = None
            notes = []
            for _ in range(args.blocks):
                for name, cmd in (("rdmacoll", rdmacoll), ("ompi", ompi)):
                    res, why = run(cmd(p, nbytes, it), env, args.timeout)
                    if res is None:
                        notes.append(f"{name}: {why}")
                        continue
                    if best[name] is None or res[0] < best[name]:
                        best[name] = res[0]  # us per call
                    if name == "rdmacoll":
                        ctrl = res[3]  # the most any rank sent per call (same in every block)
                        peers = int(res[5]) if len(res) > 5 else None
            target = 2 * math.ceil(math.log2(p))
            row = {"ranks": p, "bytes": nbytes, "iters": it, "rdmacoll_us": best["rdmacoll"],
                   "ompi_us": best["ompi"], "ctrl_per_rank_per_call": ctrl,
                   "ctrl_target": target, "connected_peers": peers,
                   "notes": "; ".join(notes)}
            rows.append(row)
            r = row["rdmacoll_us"]
            o = row["ompi_us"]
            print(f"p={p:3d} {human(nbytes):>7}: rdmacoll {r} us, Open MPI {o} us, "
                  f"control messages/rank/call {ctrl} (target {target}), "
                  f"connected peers {peers} of {p - 1}"
                  + (f"  [{row['notes']}]" if notes else ""), flush=True)
    elapsed = time.time() - start

    with open(os.path.join(args.out, "scale.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)

    def fmt(x, digits=1):
        return "-" if x is None else f"{x:.{digits}f}"

    lines = [f"# Scaling: all_gather_into_tensor against MPI_Allgather "
             f"({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores)", "",
             "Every rank its own host (`RDMACOLL_HOST_ID`) over TCP on one machine (`UCX_TLS=tcp`; "
             "Open MPI `--mca btl tcp,self`), ranks oversubscribing the cores from p = 4. "
             f"Best of {args.blocks} interleaved blocks; us per call of back-to-back calls, the "
             "slowest rank's; ratio = Open MPI / rdmacoll (> 1: rdmacoll faster). Control "
             "messages: what the rank that sent the most sent per call, against the target "
             "2 ceil(log2 p). Connected peers: the most peers a rank had opened a connection to "
             "(a UCX endpoint, opened on first use) by the end of the run, of p - 1. "
             f"`/usr/bin/python3 perf/scale/scale.py` ({elapsed:.0f} s).", ""]
    for nbytes in sizes:
        lines += [f"## {human(nbytes)} per rank", "",
                  "| p | rdmacoll (us) | Open MPI (us) | ratio | control messages / rank / call | "
                  "target 2 ceil(log2 p) | connected peers / rank |",
                  "|---|---|---|---|---|---|---|"]
        for row in rows:
            if row["bytes"] != nbytes:
                continue
            r, o = row["rdmacoll_us"], row["ompi_us"]
            ratio = f"**{o / r:.2f}x**" if r and o else "-"
            lines.append(f"| {row['ranks']} | {fmt(r)} | {fmt(o)} | {ratio} | "
                         f"{fmt(row['ctrl_per_rank_per_call'], 2)} | {row['ctrl_target']} | "
                         f"{'-' if row['connected_peers'] is None else row['connected_peers']} "
                         f"of {row['ranks'] - 1} |")
        lines.append("")
    with open(os.path.join(args.out, "scale.md"), "w") as f:
        f.write("\n".join(lines))

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot (run with /usr/bin/python3, python3-matplotlib)",
              file=sys.stderr)
    else:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
        for nbytes in sizes:
            sel = [r for r in rows if r["bytes"] == nbytes]
            for key, label, style in (("rdmacoll_us", "rdmacoll", "-"),
                                      ("ompi_us", "Open MPI", "--")):
                pts = [(r["ranks"], r[key]) for r in sel if r[key]]
                ax1.plot([x for x, _ in pts], [y for _, y in pts], style, marker="o",
                         label=f"{label}, {human(nbytes)}")
            pts = [(r["ranks"], r["ctrl_per_rank_per_call"]) for r in sel
                   if r["ctrl_per_rank_per_call"] is not None]
            ax2.plot([x for x, _ in pts], [y for _, y in pts], marker="o",
                     label=f"rdmacoll, {human(nbytes)}")
        ax2.plot(ranks, [2 * math.ceil(math.log2(p)) for p in ranks], "k--",
                 label="target 2 ceil(log2 p)")
        for ax in (ax1, ax2):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("ranks (one per host)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        ax1.set_yscale("log")
        ax1.set_ylabel("us per call")
        ax1.set_title("all-gather time per call over TCP")
        ax2.set_ylabel("control messages per rank per call")
        ax2.set_title("rdmacoll control traffic")
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "scale.png"), dpi=110)
    print(f"wrote {args.out}/scale.md, scale.csv, scale.png ({elapsed:.0f} s)")
    return 0 if all(r["rdmacoll_us"] and r["ompi_us"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
