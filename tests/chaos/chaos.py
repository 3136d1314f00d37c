#!/usr/bin/env python3
"""Chaos and soak runs: random collectives (chaos_worker) on 2-8 ranks (one run in six: 4 threads
per rank on groups of their own, over TCP; completion callbacks that throw or destroy their
group in every run; no token in three runs in ten), with a fault in most runs:
- a rank SIGKILLed or SIGSTOPped at a random moment;
- a rank exiting mid-run, through abort_process_group() (torch's exit hook) or by exit()
  without destroy_process_group;
- hostile clients on the rendezvous port: garbage, half frames, a hello without the token, a
  flood of connections, pipelined GETs of a large value and GETs left waiting;
- a squatter that holds the port before rank 0 and answers like a store that has no token.
Counts, over all runs: hangs (a survivor still running past timeout + grace + slack), crashes (a
survivor killed by a signal or exiting with another code), wrong elements, and unexpected
errors (an error in a run without a fault that could cause one). All must be 0. For exiting
ranks it also reports how long the survivors that raised took after the exit.

    tests/chaos/chaos.py --worker build/tests/chaos_worker --runs 1000

With --recover, the runs whose fault takes a rank away (kill, stop, exit) are recovery runs:
each survivor that raises shrinks the world without the victim (shrink_group, AbortParent) and
runs 20 more random calls on the shrunk group, every element checked. Also counted then:
recoveries that completed, and survivors that raised again after shrinking (must be 0).
"""
import argparse
import os
import random
import re
import secrets
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

TIMEOUT_S = 5   # RDMACOLL_TIMEOUT_S of every run
GRACE_S = 5     # cleanup after a failure: min(timeout, 10 s)
SLACK_S = 25    # start-up, hwloc, a loaded 2-core machine


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def frame(op, key=b"", value=b"", value_len=None):
    """A store frame: magic, op, status 0, key and value lengths, key, value (value_len: what
    the header promises, when more than is sent)."""
    n = len(value) if value_len is None else value_len
    return struct.pack("<IBBHII", 0x52444353, op, 0, 0, len(key), n) + key + value


SET, GET, CHALLENGE, HELLO = 1, 2, 7, 8


def hostile_client(port, kind, stop):
    """Misbehaves at the store until `stop` is set; only ever connects to 127.0.0.1."""
    while not stop.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=1)
        except OSError:
            time.sleep(0.05)
            continue
        try:
            if kind == "garbage":
                s.sendall(os.urandom(random.randint(1, 4096)))
            elif kind == "half_frame":  # a header promising 64 MiB, then silence
                s.sendall(frame(SET, b"k" * 8, value_len=64 << 20))
                stop.wait(1.0)
            elif kind == "no_token":  # a well-formed hello without the job's proof
                s.sendall(frame(HELLO))
                s.recv(4096)
            elif kind == "get_flood":  # one large value, then GETs of it in one send, unread
                s.settimeout(1)
                s.recv(48)  # the challenge
                s.sendall(frame(HELLO))
                s.sendall(frame(SET, b"chaos/big", b"x" * (1 << 20)))
                get = frame(GET, b"chaos/big", struct.pack("<q", 1000))
                wait = frame(GET, b"chaos/never", struct.pack("<q", 60000))
                s.sendall(get * 300 + wait * 40)
                stop.wait(1.0)
            elif kind == "flood":
                extra = []
                for _ in range(50):
                    try:
                        extra.append(socket.create_connection(("127.0.0.1", port), timeout=1))
                    except OSError:
                        break
                stop.wait(0.5)
                for e in extra:
                    e.close()
        except OSError:
            pass
        finally:
            s.close()
        stop.wait(0.02)


def squatter(listener, stop):
    """Holds the rendezvous port before rank 0 and answers like a store without a token: a
    challenge, then a bare "ok" to whatever comes, then garbage."""
    listener.settimeout(0.1)
    conns = []
    while not stop.is_set():
        try:
            c, _ = listener.accept()
        except OSError:
            continue
        try:
            c.sendall(frame(CHALLENGE, value=os.urandom(32)))
            c.settimeout(0.5)
            if c.recv(4096):
                c.sendall(frame(HELLO) + os.urandom(64))
        except OSError:
            pass
        conns.append(c)
    for c in conns:
        c.close()
    listener.close()


def one_run(worker, index, seed, rng, recover=False):
    n = rng.choice([2, 2, 3, 3, 4, 4, 5, 6, 8])
    fault = rng.choice(["none", "kill", "kill", "stop", "stop", "exit", "exit", "hostile",
                        "hostile", "squatter"])
    calls = rng.randint(5, 60)
    env = dict(os.environ)
    env.pop("RDMACOLL_AUTH_TOKEN", None)
    port = free_port()
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(n),
               RDMACOLL_TIMEOUT_S=str(TIMEOUT_S), RDMACOLL_JOB_ID=f"chaos-{index}",
               UCX_WARN_UNUSED_ENV_VARS="n")
    if rng.random() < 0.7:
        env["RDMACOLL_AUTH_TOKEN"] = secrets.token_hex(16)
    if rng.random() < 0.3:
        env["UCX_TLS"] = "tcp"
    if rng.random() < 0.3:
        env["RDMACOLL_ALGO"] = rng.choice(["ring", "bruck", "direct"])
    # One run in six: the case that once stalled, 4 threads per rank each on a group of its own,
    # 2 ranks over UCX_TLS=tcp.
    threads = 1
    if rng.random() < 1 / 6 and fault != "exit":  # a rank exits from its only thread
        threads, n = 4, 2
        env.update(WORLD_SIZE="2", UCX_TLS="tcp")
    victim = rng.randrange(n) if fault in ("kill", "stop", "exit") else None
    stop = threading.Event()
    if fault == "squatter":
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        threading.Thread(target=squatter, args=(listener, stop), daemon=True).start()
    exit_mode = None
    if fault == "exit":
        exit_mode = rng.choice(["abort", "plain"])
        fault = "exit:" + exit_mode
    recovering = recover and victim is not None and threads == 1
    if recovering:
        env["CHAOS_RECOVER"] = str(victim)
    procs = []
    for r in range(n):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r))
        if r == victim and exit_mode:
            e["CHAOS_EXIT_AT"] = f"{rng.randrange(calls)}:{exit_mode}"
        procs.append(subprocess.Popen([worker, str(seed), str(calls), str(threads)], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    hostile = None
    if fault == "hostile":
        kind = rng.choice(["garbage", "half_frame", "no_token", "flood", "get_flood"])
        hostile = threading.Thread(target=hostile_client, args=(port, kind, stop), daemon=True)
        hostile.start()
        fault = "hostile:" + kind
    start = time.monotonic()
    if victim is not None and not exit_mode:
        time.sleep(rng.uniform(0.0, 2.0))
        if procs[victim].poll() is None:
            procs[victim].send_signal(signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
    deadline = start + TIMEOUT_S + GRACE_S + SLACK_S + (2.0 if victim is not None else 0)
    if recovering:  # the shrunk group's calls (their timeout is 30 s) and a second teardown
        deadline += 35
    survivors = [r for r in range(n) if r != victim]
    watched = survivors + ([victim] if exit_mode else [])  # an exiting rank must end too
    for r in watched:
        try:
            procs[r].wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    hung = [r for r in watched if procs[r].poll() is None]
    stop.set()
    for p in procs:  # the stopped victim and anything hung
        if p.poll() is None:
            p.kill()
            p.wait()
    outs = [p.stdout.read() for p in procs]
    result = {"fault": fault + ("+threads" if threads > 1 else ""), "n": n, "hang": 0,
              "crash": 0, "wrong": 0, "unexpected": 0,
              "ok_ranks": 0, "error_ranks": 0, "recovered": 0, "unrecovered": 0, "notes": [],
              "noticed_after": []}
    if exit_mode and victim not in hung:
        if procs[victim].returncode != 0:
            result["crash"] += 1
            result["notes"].append(f"exiting rank {victim} exit {procs[victim].returncode}:\n"
                                   f"{outs[victim][-3000:]}")
        left = re.search(r"leaving at ([0-9.]+)", outs[victim])
        for r in survivors:
            raised = re.search(r"error at ([0-9.]+)", outs[r])
            if left and raised and procs[r].returncode == 3:
                result["noticed_after"].append(float(raised.group(1)) - float(left.group(1)))
    # A victim that leaves while others are still in init_process_group (rank 0 hosts the
    # store) ends their init: they raise and exit, and the survivors' shrunk group, which
    # leaves out only the victim, still holds them. Recovery does not apply to such a run.
    init_lost = recovering and any(re.search(r"error at [0-9.]+: init_process_group", outs[r])
                                   for r in survivors)
    result["init_lost"] = int(init_lost)
    for r in hung:
        result["hang"] += 1
        result["notes"].append(f"rank {r} hung:\n{outs[r][-2000:]}")
    for r in survivors:
        if r in hung:
            continue
        code = procs[r].returncode
        if code == 0:
            result["ok_ranks"] += 1
            if "recovered:" in outs[r]:
                result["recovered"] += 1
        elif code == 3:
            result["error_ranks"] += 1
            if fault == "none" or fault.startswith("hostile"):  # a squatter: errors expected
                result["unexpected"] += 1
                result["notes"].append(f"rank {r} raised without a fault:\n{outs[r][-2000:]}")
            elif recovering and not init_lost and outs[r].count("error at") > 1:
                result["unrecovered"] += 1  # it raised again on the shrunk group
                result["notes"].append(f"rank {r} raised after shrinking:\n{outs[r][-2000:]}")
        elif code == 4:
            result["wrong"] += 1
            result["notes"].append(f"rank {r} wrong:\n{outs[r][-2000:]}")
        else:
            result["crash"] += 1
            result["notes"].append(f"rank {r} exit {code}:\n{outs[r][-3000:]}")
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--recover", action="store_true",
                    help="survivors of a lost rank shrink the world and go on")
    args = ap.parse_args()
    master_seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(master_seed)
    totals = {"runs": 0, "hang": 0, "crash": 0, "wrong": 0, "unexpected": 0,
              "ok_ranks": 0, "error_ranks": 0, "recovered": 0, "unrecovered": 0, "init_lost": 0}
    faults = {}
    noticed = []
    t0 = time.monotonic()
    for i in range(args.runs):
        seed = rng.randrange(1 << 62)
        res = one_run(args.worker, i, seed, rng, args.recover)
        totals["runs"] += 1
        for k in ("hang", "crash", "wrong", "unexpected", "ok_ranks", "error_ranks", "recovered",
                  "unrecovered", "init_lost"):
            totals[k] += res[k]
        faults[res["fault"]] = faults.get(res["fault"], 0) + 1
        noticed += res["noticed_after"]
        if res["notes"]:
            print(f"run {i} (seed {seed}, {res['n']} ranks, fault {res['fault']}):", flush=True)
            for note in res["notes"]:
                print("  " + note.replace("\n", "\n  "), flush=True)
    took = time.monotonic() - t0
    print(f"chaos: master seed {master_seed}, {totals['runs']} runs in {took:.0f} s "
          f"(faults: {faults}); survivor ranks ok {totals['ok_ranks']}, clear errors "
          f"{totals['error_ranks']}; hangs {totals['hang']}, crashes {totals['crash']}, "
          f"wrong elements {totals['wrong']}, unexpected errors {totals['unexpected']}"
          + (f"; recoveries completed {totals['recovered']}, raised after shrinking "
             f"{totals['unrecovered']}, runs whose victim ended others' init (no recovery) "
             f"{totals['init_lost']}" if args.recover else ""), flush=True)
    if noticed:
        noticed.sort()
        print(f"chaos: after a rank exited, {len(noticed)} survivors raised; seconds after the "
              f"exit: median {noticed[len(noticed) // 2]:.2f}, max {noticed[-1]:.2f}", flush=True)
    bad = totals["hang"] + totals["crash"] + totals["wrong"] + totals["unexpected"] + \
        totals["unrecovered"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
