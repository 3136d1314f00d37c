#!/usr/bin/python3
"""The qualification kit's report (ansible/qualify.yml, scripts/qualify.sh).

  report.py RESULTS_DIR --hosts h1,h2,... --faults kill,flap,outage

RESULTS_DIR holds one folder per host (inventory order) with what qualify.yml fetched. Writes
report.md and busbw.png there and prints the report. Exit status 1 when a fault case did not end
as it must, an element was wrong, or a measurement is missing.
"""
import argparse
import json
import os
import re
import sys

ERRORISH = re.compile(r"err|discard|drop|retr|nak|timeout|out_of|seq|duplicate|rnr|symbol|"
                      r"link_downed|recovery|integrity|overrun", re.I)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def perftest_gbits(text):
    """BW average [Gb/sec] of ib_write_bw --report_gbits output, or None."""
    if not text:
        return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0].isdigit() and parts[1].isdigit():
            try:
                return float(parts[3])
            except ValueError:
                return None
    return None


def counters(text):
    before, after, cur = {}, {}, None
    for line in (text or "").splitlines():
        if line.startswith("# before"):
            cur = before
        elif line.startswith("# after"):
            cur = after
        elif cur is not None and line.strip():
            name, _, value = line.strip().rpartition(" ")
            try:
                cur[name] = int(value)
            except ValueError:
                pass
    return before, after


def fault_outcome(case, logs):
    """(ok, what) for one fault case from rank 0's and rank 1's logs."""
    r0, r1 = logs
    if r0 is None or r1 is None:
        return False, "no log from " + ("rank 0" if r0 is None else "rank 1")
    def exit_of(t):
        m = re.search(r"^exit (\d+) after ([\d.]+) s", t, re.M)
        return (int(m.group(1)), float(m.group(2))) if m else (None, None)
    (e0, s0), (e1, s1) = exit_of(r0), exit_of(r1)
    def result(t):
        m = [l for l in t.splitlines() if l.startswith("RESULT") and "TRANSPORT" not in l
             and "LINK" not in l]
        return m[-1] if m else "(no result line)"
    if case == "kill":
        ok = e0 == 0 and "RESULT DETECTED PeerFailure" in r0 and e1 == 137
        what = f"rank 0: {result(r0)} (exit {e0}, {s0} s); rank 1 killed (exit {e1})"
    elif case == "flap":
        ok = e0 == 0 and e1 == 0 and "RESULT OK" in r0 and "RESULT OK" in r1
        what = f"rank 0: {result(r0)[:90]} (exit {e0}); rank 1: exit {e1}, {s1} s"
    else:
        ok = (e0 == 0 and e1 == 0 and "RESULT DETECTED PeerFailure" in r0
              and "RESULT DETECTED PeerFailure" in r1)
        what = f"rank 0: {result(r0)[:110]} (exit {e0}); rank 1: {result(r1)[:110]} (exit {e1})"
    return ok, what


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--hosts", required=True)
    ap.add_argument("--faults", default="kill,flap,outage")
    args = ap.parse_args()
    hosts = args.hosts.split(",")
    faults = [f for f in args.faults.split(",") if f]
    d = args.results
    problems = []
    lines = [f"# rdmacoll qualification: {len(hosts)} hosts ({', '.join(hosts)})", ""]

    # What the fabric gives, ring neighbour to ring neighbour.
    sizes = sorted({int(f.split(".")[1]) for h in hosts if os.path.isdir(os.path.join(d, h))
                    for f in os.listdir(os.path.join(d, h)) if re.fullmatch(r"ib_write_bw\.\d+", f)})
    wire = {}
    lines += ["## ib_write_bw (perftest), each host to the next in the ring", "",
              "| from | to | " + " | ".join(f"{s} B (Gb/s)" for s in sizes) + " |",
              "|---|---|" + "---|" * len(sizes)]
    for i, h in enumerate(hosts):
        row = []
        for s in sizes:
            g = perftest_gbits(read(os.path.join(d, h, f"ib_write_bw.{s}")))
            row.append("missing" if g is None else f"{g:.2f}")
            if g is None:
                problems.append(f"no ib_write_bw figure from {h} at {s} B")
            else:
                wire.setdefault(s, []).append(g)
        lines.append(f"| {h} | {hosts[(i + 1) % len(hosts)]} | " + " | ".join(row) + " |")
    lines.append("")

    # What rdmacoll makes of it.
    rank0 = None
    for h in hosts:
        text = read(os.path.join(d, h, "all_gather.json"))
        if text:
            r = json.loads(text)
            if r.get("rank") == 0:
                rank0 = r
            for row in r["results"]:
                if row["wrong"] or row["inplace_wrong"]:
                    problems.append(f"{h}: {row['wrong']} wrong elements at {row['size']} B")
    if rank0 is None:
        problems.append("no all_gather_perf report from rank 0")
    else:
        lines += [f"## all_gather_into_tensor, {rank0['world']} ranks (one per host), transport "
                  f"{rank0['transport']}", "",
                  "| bytes per rank | time (us) | busbw (GB/s) | busbw / ib_write_bw |",
                  "|---|---|---|---|"]
        for row in rank0["results"]:
            frac = ""
            if row["size"] in wire:
                wire_gbs = min(wire[row["size"]]) / 8
                frac = f"{row['busbw'] / wire_gbs:.2f}" if wire_gbs > 0 else ""
            lines.append(f"| {row['size']} | {row['time_us']:.1f} | {row['busbw']:.3f} | {frac} |")
        lines.append("")

    # Per-call counters (rank 0).
    text = read(os.path.join(d, hosts[0], "counters.log")) or ""
    rows = [l for l in text.splitlines() if l.startswith("RESULT COUNTERS rank 0")]
    if rows:
        keys = ["work_requests", "doorbells", "signaled", "completions", "eager_writes",
                "eager_slot_waits", "eager_credit_writes", "receive_credit_writes", "credit_waits",
                "lane_resets"]
        lines += ["## Per-call transport counters (rank 0 of 2)", "",
                  "| bytes per rank | us per call | " + " | ".join(keys) + " |",
                  "|---|---|" + "---|" * len(keys)]
        for l in rows:
            kv = dict(re.findall(r"(\w+)=([\d.]+)", l))
            b = re.search(r"bytes (\d+) us ([\d.]+) wrong (\d+)", l)
            if b and int(b.group(3)):
                problems.append(f"per-call counters run: {b.group(3)} wrong elements")
            lines.append(f"| {b.group(1) if b else '?'} | {b.group(2) if b else '?'} | " +
                         " | ".join(kv.get(k, "") for k in keys) + " |")
        lines.append("")
    else:
        problems.append("no per-call counters from rank 0")

    # The fault matrix.
    if faults:
        lines += ["## Fault matrix (the first two hosts)", "", "| case | outcome | as it must |",
                  "|---|---|---|"]
        for case in faults:
            logs = [read(os.path.join(d, h, f"fault.{case}.log")) for h in hosts[:2]]
            ok, what = fault_outcome(case, logs)
            if not ok:
                problems.append(f"fault case {case}: {what}")
            lines.append(f"| {case} | {what.replace('|', '/')} | {'yes' if ok else '**no**'} |")
        lines.append("")

    # The NICs' counters that moved and look like errors.
    lines += ["## NIC counters that moved during the run (error-like names)", "",
              "| host | counter | before | after |", "|---|---|---|---|"]
    moved = 0
    for h in hosts:
        before, after = counters(read(os.path.join(d, h, "nic-counters.txt")))
        for name, v in sorted(after.items()):
            if ERRORISH.search(name.rsplit("/", 1)[-1]) and v != before.get(name, v):
                lines.append(f"| {h} | {name} | {before.get(name)} | {v} |")
                moved += 1
    if not moved:
        lines.append("| (none) | | | |")
    lines.append("")
    lines += ["## Verdict", ""]
    lines += [f"- {p}" for p in problems] or ["- every measurement present, every fault case as it "
                                              "must, no wrong element"]
    report = "\n".join(lines) + "\n"
    with open(os.path.join(d, "report.md"), "w") as f:
        f.write(report)
    if rank0 is not None:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            xs = [r["size"] for r in rank0["results"]]
            fig, ax = plt.subplots(figsize=(7, 4))
            ax.plot(xs, [r["busbw"] for r in rank0["results"]], "o-",
                    label=f"rdmacoll all_gather busbw ({rank0['transport']})")
            if wire:
                ws = sorted(wire)
                ax.plot(ws, [min(wire[s]) / 8 for s in ws], "s--", label="ib_write_bw (slowest pair)")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("bytes per rank")
            ax.set_ylabel("GB/s")
            ax.legend()
            ax.grid(True, alpha=0.3)
            fig.tight_layout()
            fig.savefig(os.path.join(d, "busbw.png"), dpi=110)
        except ImportError:
            print("(no matplotlib: no plot)")
    print(report)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
