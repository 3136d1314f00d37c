#!/usr/bin/python3
"""Checks and plots a multi-host all_gather_perf run fetched by ansible/bench.yml.

  check_bench.py RESULTS_DIR --hosts N --world W [--transport verbs]

RESULTS_DIR holds one folder per host with that host's rank-*.json files (all_gather_perf -J
'...rank-%r.json'). Fails unless every rank 0..W-1 reported exactly once, the reports come from
N distinct hosts, and #wrong is 0 everywhere. Writes summary.md and busbw.png into RESULTS_DIR.
"""
import argparse
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--hosts", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--transport", default="", help="every rank must have used this transport")
    args = ap.parse_args()
    reports = []
    for path in sorted(glob.glob(os.path.join(args.results, "*", "rank-*.json"))):
        with open(path) as f:
            r = json.load(f)
        r["path"] = path
        reports.append(r)
    problems = []
    ranks = sorted(r["rank"] for r in reports)
    if ranks != list(range(args.world)):
        problems.append(f"ranks reported: {ranks}, expected 0..{args.world - 1} once each")
    hosts = sorted({r["host"] for r in reports})
    if len(hosts) != args.hosts:
        problems.append(f"reports came from {len(hosts)} distinct host(s) {hosts}, expected {args.hosts}")
    folders = sorted({os.path.basename(os.path.dirname(r["path"])) for r in reports})
    if len(folders) != args.hosts:
        problems.append(f"fetched from {len(folders)} inventory host(s), expected {args.hosts}")
    for r in reports:
        if args.transport and r.get("transport") != args.transport:
            problems.append(f"rank {r['rank']} on {r['host']} used the {r.get('transport')} "
                            f"transport, not {args.transport}")
        if r["world"] != args.world:
            problems.append(f"rank {r['rank']} ran in a world of {r['world']}")
        for row in r["results"]:
            if row["wrong"] or row["inplace_wrong"]:
                problems.append(f"rank {r['rank']} on {r['host']}: {row['wrong']} wrong elements at "
                                f"{row['size']} B ({row['inplace_wrong']} in place)")
    rank0 = next((r for r in reports if r["rank"] == 0), None)
    lines = [f"# Multi-host all_gather_into_tensor: {args.world} ranks on {len(hosts)} hosts "
             f"({', '.join(hosts)})", ""]
    if rank0:
        lines += [f"transport: {rank0['transport']}", "",
                  "| bytes per rank | time (us) | algbw (GB/s) | busbw (GB/s) | p50 (us) | p99 (us) |",
                  "|---|---|---|---|---|---|"]
        for row in rank0["results"]:
            lines.append(f"| {row['size']} | {row['time_us']:.1f} | {row['algbw']:.3f} | "
                         f"{row['busbw']:.3f} | {row['p50_us']:.1f} | {row['p99_us']:.1f} |")
        try:
            from plot import save_busbw_plot

            xs = [row["size"] for row in rank0["results"]]
            ys = [row["busbw"] for row in rank0["results"]]
            save_busbw_plot(os.path.join(args.results, "busbw.png"),
                            [(f"{args.world} ranks on {len(hosts)} hosts ({rank0['transport']})",
                              [("rdmacoll all_gather_into_tensor", xs, ys, True)])], columns=1)
        except ImportError:
            lines.append("(no plot: python3-matplotlib is missing)")
    lines += ["", "every rank reported; #wrong 0" if not problems else "PROBLEMS:"] + problems
    with open(os.path.join(args.results, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
