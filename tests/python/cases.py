"""The backend's test cases, one per command-line name, run by every rank under a launcher
(test_backend.py starts them with rdmacoll-run). A case raises (and the rank exits non-zero)
when any element of any output is wrong; it prints "ok <case>" at the end.
    rdmacoll-run -n 4 /usr/bin/python3 cases.py ops
"""
import datetime
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist

import rdmacoll_torch

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64]
FLOATS = {torch.float16, torch.bfloat16, torch.float32, torch.float64}


def init(timeout_s=120):
    dist.init_process_group(backend="rdmacoll", timeout=datetime.timedelta(seconds=timeout_s))
    assert dist.get_backend() == "rdmacoll", dist.get_backend()
    return dist.get_rank(), dist.get_world_size()


def values(rank, n, dtype, salt=0):
    """Rank `rank`'s small exact values: 1..3 (0/1 for bool)."""
    v = (torch.arange(n, dtype=torch.int64) * 3 + rank * 7 + salt) % 3 + 1
    return (v % 2).to(torch.bool) if dtype == torch.bool else v.to(dtype)


def expect_equal(got, want, what):
    if got.dtype in FLOATS or want.dtype in FLOATS:
        ok = torch.allclose(got.double(), want.double(), rtol=1e-2 if got.dtype in
                            (torch.float16, torch.bfloat16) else 1e-6)
    else:
        ok = torch.equal(got, want)
    if not ok:
        raise AssertionError(f"{what}: got {got.flatten()[:8].tolist()}..., "
                             f"want {want.flatten()[:8].tolist()}...")


def reduce_ref(tensors, op):
    """The reduction torch defines, folded in rank order (in float64 for 16-bit floats)."""
    dt = tensors[0].dtype
    acc = tensors[0].double() if dt in (torch.float16, torch.bfloat16) else tensors[0].clone()
    for t in tensors[1:]:
        t = t.double() if dt in (torch.float16, torch.bfloat16) else t
        if dt == torch.bool:
            acc = acc | t if op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.BOR) else \
                acc ^ t if op == dist.ReduceOp.BXOR else acc & t
        elif op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            acc = acc + t
        elif op == dist.ReduceOp.PRODUCT:
            acc = acc * t
        elif op == dist.ReduceOp.MIN:
            acc = torch.minimum(acc, t)
        elif op == dist.ReduceOp.MAX:
            acc = torch.maximum(acc, t)
        elif op == dist.ReduceOp.BAND:
            acc = acc & t
        elif op == dist.ReduceOp.BOR:
            acc = acc | t
        elif op == dist.ReduceOp.BXOR:
            acc = acc ^ t
    if op == dist.ReduceOp.AVG:
        acc = acc / len(tensors)
    return acc.to(dt)


def ops_for(dtype):
    R = dist.ReduceOp
    if dtype in FLOATS:
        return [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG]
    return [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR]


def case_ops():
    """Every collective, every dtype and operator, flat, stacked and in place, 0 to 70000
    elements (past the eager limit)."""
    rank, p = init()
    for n in (0, 1, 5, 70000):
        for dt in DTYPES:
            mine = values(rank, n, dt)
            every = [values(r, n, dt) for r in range(p)]
            # all_gather_into_tensor: flat, stacked, and in place (the input is this rank's
            # slot of the output, as FSDP calls it).
            flat = torch.zeros(p * n, dtype=dt)
            dist.all_gather_into_tensor(flat, mine)
            expect_equal(flat, torch.cat(every), f"all_gather_into_tensor flat {dt} n={n}")
            stacked = torch.zeros(p, n, dtype=dt)
            dist.all_gather_into_tensor(stacked, mine)
            expect_equal(stacked, torch.stack(every), f"all_gather_into_tensor stacked {dt}")
            inplace = torch.zeros(p * n, dtype=dt)
            inplace[rank * n:(rank + 1) * n] = mine
            dist.all_gather_into_tensor(inplace, inplace[rank * n:(rank + 1) * n])
            expect_equal(inplace, torch.cat(every), f"all_gather_into_tensor in place {dt}")
            # all_gather into a list.
            outs = [torch.zeros(n, dtype=dt) for _ in range(p)]
            dist.all_gather(outs, mine)
            for r in range(p):
                expect_equal(outs[r], every[r], f"all_gather list {dt} from {r}")
            # broadcast from every rank.
            for src in range(p):
                t = mine.clone()
                dist.broadcast(t, src)
                expect_equal(t, every[src], f"broadcast {dt} from {src}")
            if n > 1000 and dt not in (torch.int32, torch.float32, torch.bool):
                continue  # reductions at the large size: a few dtypes suffice
            for op in ops_for(dt):
                t = mine.clone()
                dist.all_reduce(t, op=op)
                expect_equal(t, reduce_ref(every, op), f"all_reduce {op} {dt} n={n}")
                # reduce_scatter_tensor: rank r's input is p pieces of n.
                ins = [values(r, p * n, dt, salt=1) for r in range(p)]
                out = torch.zeros(n, dtype=dt)
                dist.reduce_scatter_tensor(out, ins[rank], op=op)
                want = reduce_ref(ins, op)[rank * n:(rank + 1) * n]
                expect_equal(out, want, f"reduce_scatter_tensor {op} {dt} n={n}")
                out2 = torch.zeros(n, dtype=dt)
                dist.reduce_scatter(out2, list(ins[rank].view(p, n)) if n else
                                    [torch.zeros(0, dtype=dt)] * p, op=op)
                expect_equal(out2, want, f"reduce_scatter list {op} {dt} n={n}")
    # Complex tensors travel as float pairs.
    z = torch.complex(torch.arange(4.) + rank, torch.ones(4) * rank)
    dist.all_reduce(z)
    expect_equal(torch.view_as_real(z), torch.view_as_real(
        sum(torch.complex(torch.arange(4.) + r, torch.ones(4) * r) for r in range(p))),
        "complex all_reduce")
    dist.barrier()
    dist.destroy_process_group()


def case_subgroups():
    """[0, 1], [1, 3] and all ranks, used one after another; only members call."""
    rank, p = init()
    assert p == 4
    groups = {(0, 1): dist.new_group([0, 1]), (1, 3): dist.new_group([1, 3]),
              (0, 1, 2, 3): dist.new_group([0, 1, 2, 3])}
    for it in range(5):
        for ranks, g in groups.items():
            if rank not in ranks:
                continue
            t = torch.full((100,), float(rank + it))
            dist.all_reduce(t, group=g)
            expect_equal(t, torch.full((100,), float(sum(r + it for r in ranks))),
                         f"all_reduce on {ranks}")
            out = torch.zeros(len(ranks) * 3, dtype=torch.int64)
            dist.all_gather_into_tensor(out, torch.full((3,), rank, dtype=torch.int64), group=g)
            expect_equal(out, torch.tensor([r for r in ranks for _ in range(3)]),
                         f"all_gather on {ranks}")
            b = torch.full((5,), rank, dtype=torch.int32)
            dist.broadcast(b, ranks[-1], group=g)  # src is a global rank, as in torch
            expect_equal(b, torch.full((5,), ranks[-1], dtype=torch.int32), f"broadcast {ranks}")
    dist.barrier()
    dist.destroy_process_group()


def case_async():
    """async_op=True: Work.wait, is_completed, futures (what DDP chains on), in issue order."""
    rank, p = init()
    ts = [torch.full((50000,), float(rank + i)) for i in range(6)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    futs = [w.get_future() for w in works]
    out = torch.zeros(p * 50000)
    wg = dist.all_gather_into_tensor(out, ts[0], async_op=True)  # after ts[0] is reduced
    for i, (w, f) in enumerate(zip(works, futs)):
        w.wait()
        assert w.is_completed() and w.is_success()
        got = f.wait()[0]
        expect_equal(got, torch.full((50000,), float(sum(r + i for r in range(p)))), f"future {i}")
    wg.wait()
    expect_equal(out, torch.full((p * 50000,), float(sum(range(p)))), "gather after reduce")
    chained = dist.all_reduce(torch.ones(3), async_op=True).get_future().then(
        lambda fut: fut.value()[0] * 2)
    expect_equal(chained.wait(), torch.full((3,), 2.0 * p), "then()")
    dist.barrier()
    dist.destroy_process_group()


def case_gloo_equal():
    """Where gloo has the op, rdmacoll's result equals gloo's bit for bit (or to 1e-6)."""
    rank, p = init()
    gloo = dist.new_group(backend="gloo")
    g = torch.Generator().manual_seed(rank)
    for n in (1, 1000, 300000):
        x = torch.randn(n, generator=g)
        a, b = x.clone(), x.clone()
        dist.all_reduce(a)
        dist.all_reduce(b, group=gloo)
        # Sums in another order: equal to float32 rounding (4 terms of |x| < 5).
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-5), f"all_reduce vs gloo n={n}"
        c, d = x.clone(), x.clone()
        dist.broadcast(c, 1)
        dist.broadcast(d, 1, group=gloo)
        assert torch.equal(c, d), "broadcast vs gloo"
        la = [torch.zeros(n) for _ in range(p)]
        lb = [torch.zeros(n) for _ in range(p)]
        dist.all_gather(la, x)
        dist.all_gather(lb, x, group=gloo)
        assert all(torch.equal(u, v) for u, v in zip(la, lb)), "all_gather vs gloo"
    dist.barrier()
    dist.destroy_process_group()


def case_errors():
    """Wrong shapes raise RuntimeError with rdmacoll's message on every rank; the group stays
    usable."""
    rank, p = init()
    out = torch.zeros(p * 4 + (1 if rank == 1 else 0))
    try:
        dist.all_gather_into_tensor(out, torch.zeros(4))
        raise AssertionError("no error for a wrong output size")
    except RuntimeError as e:
        want = "rejected its arguments" if rank != 1 else "expected group size"
        assert want in str(e), str(e)
    try:
        dist.all_reduce(torch.zeros(3 if rank == 0 else 4))
        raise AssertionError("no error for mismatched sizes")
    except RuntimeError as e:
        assert "ranks disagree" in str(e), str(e)
    try:
        dist.reduce_scatter_tensor(torch.zeros(3), torch.zeros(3 * p + 1))
        raise AssertionError("no error for a wrong reduce_scatter input")
    except RuntimeError as e:
        assert "reduce_scatter_tensor" in str(e), str(e)
    t = torch.full((4,), float(rank))
    dist.all_reduce(t)
    expect_equal(t, torch.full((4,), float(sum(range(p)))), "usable after errors")
    dist.barrier()
    dist.destroy_process_group()


def case_killed():
    """A rank killed mid-run: the others raise within the (short) timeout, never hang."""
    rank, p = init(timeout_s=15)
    t = torch.ones(1000)
    for _ in range(3):
        dist.all_reduce(t)
    if rank == p - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.time()
    try:
        for _ in range(1000):
            dist.all_reduce(t)
        raise AssertionError("no error after a peer died")
    except RuntimeError as e:
        took = time.time() - start
        assert took < 20, f"took {took:.1f} s"
        print(f"ok killed: rank {rank} raised after {took:.2f} s: {str(e)[:120]}", flush=True)
    os._exit(0)  # the world is broken; torch's store host may be the dead rank


def case_reinit():
    """destroy_process_group, then a fresh init_process_group in the same processes. Each
    round rendezvouses on a port of its own: torch 1.13's TCPStore server on rank 0 outlives
    its group for a moment, and a rank that reconnects to the same port in that moment is
    reset (gloo does the same)."""
    base = int(os.environ["MASTER_PORT"])
    for round_ in range(3):
        os.environ["MASTER_PORT"] = str(base + 1 + round_)
        rank, p = init()
        t = torch.full((10,), float(rank + round_))
        dist.all_reduce(t)
        expect_equal(t, torch.full((10,), float(sum(r + round_ for r in range(p)))),
                     f"round {round_}")
        dist.destroy_process_group()
        assert not rdmacoll_torch._C.is_initialized()


def case_late():
    """Ranks arrive seconds apart, as under a real launcher: the early ranks' store waits
    outlast many of the library's 250 ms abort-check slices. torch 1.13's TCPStore leaves a
    timed-out wait pending on its server, whose late answer then desynchronizes the
    connection ("Stop_waiting response is expected"); the backend must never time a wait out
    on torch's store."""
    rank = int(os.environ["RANK"])
    time.sleep(0.8 * rank)  # the skew under test, not a wait for anything
    rank, p = init()
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    expect_equal(t, torch.full((4,), float(p * (p + 1) // 2)), "all_reduce after a late join")
    time.sleep(0.8 * (p - 1 - rank))  # skew again, now at new_group
    sub = dist.new_group(list(range(p)))
    out = torch.empty(p, dtype=torch.int64)
    dist.all_gather_into_tensor(out, torch.tensor([rank * 7]), group=sub)
    expect_equal(out, torch.tensor([r * 7 for r in range(p)]), "all_gather on a late group")
    dist.barrier()
    dist.destroy_process_group()


def case_threads():
    """A second Python thread runs collectives on another group while the main thread runs
    its own."""
    rank, p = init()
    other = dist.new_group(list(range(p)))
    errors = []

    def side():
        try:
            for i in range(100):
                t = torch.full((2000,), float(rank * i))
                dist.all_reduce(t, group=other)
                expect_equal(t, torch.full((2000,), float(sum(r * i for r in range(p)))),
                             f"thread all_reduce {i}")
        except Exception as e:  # reported by the main thread
            errors.append(e)

    th = threading.Thread(target=side)
    th.start()
    for i in range(100):
        out = torch.zeros(p * 500)
        dist.all_gather_into_tensor(out, torch.full((500,), float(rank + i)))
        expect_equal(out, torch.cat([torch.full((500,), float(r + i)) for r in range(p)]),
                     f"main all_gather {i}")
    th.join()
    if errors:
        raise errors[0]
    dist.barrier()
    dist.destroy_process_group()


def case_ddp():
    """DDP and ZeroRedundancyOptimizer, 20 steps from one seed on rdmacoll and on gloo (a gloo
    group in the same processes): the parameters agree to 1e-6."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, p = init()
    gloo = dist.new_group(backend="gloo")

    def train(group, zero):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 4))
        ddp = DDP(model, process_group=group)
        if zero:
            opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.SGD,
                                          lr=0.05, process_group=group)
        else:
            opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        data = torch.Generator().manual_seed(100 + rank)
        for _ in range(20):
            x = torch.randn(8, 16, generator=data)
            y = torch.randn(8, 4, generator=data)
            opt.zero_grad()
            torch.nn.functional.mse_loss(ddp(x), y).backward()
            opt.step()
        return [q.detach().clone() for q in model.parameters()]

    for zero in (False, True):
        ours = train(None, zero)
        theirs = train(gloo, zero)
        for a, b in zip(ours, theirs):
            if not torch.allclose(a, b, atol=1e-6, rtol=0):
                raise AssertionError(f"zero={zero}: max difference {(a - b).abs().max().item()}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    name = sys.argv[1]
    globals()["case_" + name]()
    print(f"ok {name}", flush=True)
