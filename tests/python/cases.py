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
        assert isinstance(e, DistBackendError), type(e)  # torch 2.x: a communication error
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


TORCH2 = int(torch.__version__.split(".")[0]) >= 2
DistBackendError = getattr(dist, "DistBackendError", RuntimeError)


def case_exit():
    """The last rank leaves after 3 calls: by an uncaught exception, by Ctrl-C (SIGINT) or by
    ending without destroy_process_group (argv[2]), with torch's default 30-minute timeout. The
    others are in their next all_reduce: they must raise a communication error within about a
    second, not at the timeout."""
    how = sys.argv[2]
    dist.init_process_group(backend="rdmacoll")
    rank, p = dist.get_rank(), dist.get_world_size()
    t = torch.ones(1000)
    for _ in range(3):
        dist.all_reduce(t)
    if rank == p - 1:
        print(f"leaving at {time.time():.3f}", flush=True)
        if how == "exception":
            raise RuntimeError("the user's code failed")
        if how == "sigint":
            # A shell's background job starts with SIGINT ignored; a terminal's Ctrl-C would not.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(60)  # the KeyboardInterrupt arrives here
        sys.exit(0)  # "nodestroy"
    start = time.time()
    try:
        for _ in range(100000):
            dist.all_reduce(t)
        raise AssertionError("no error after a peer left")
    except RuntimeError as e:
        took = time.time() - start
        assert isinstance(e, DistBackendError), type(e)
        print(f"ok exit: rank {rank} raised at {time.time():.3f} after {took:.2f} s: "
              f"{str(e)[:160]}", flush=True)
    os._exit(0)


def case_uaf():
    """A caller that keeps only the future (torch's quantization hook does) and drops the work
    and the input: the input must live until the collective has read it. Each call waits behind
    a large one, so it has not started when its input goes; the freed memory is then reused."""
    rank, p = init()
    n = 1 << 18
    for it in range(5):
        big = torch.ones(1 << 21)
        w0 = dist.all_reduce(big, async_op=True)
        out = torch.zeros(p * n)
        fut = dist.all_gather_into_tensor(out, torch.full((n,), float(rank + it)),
                                          async_op=True).get_future()
        out2 = torch.zeros(n)
        ins = [torch.full((n,), float(rank * 10 + r + it)) for r in range(p)]
        fut2 = dist.reduce_scatter(out2, ins, async_op=True).get_future()  # stacked temporary
        del ins
        junk = [torch.full((n,), -7.0) for _ in range(16)]  # reuses what was freed
        fut.wait()
        fut2.wait()
        w0.wait()
        del junk
        expect_equal(out, torch.cat([torch.full((n,), float(r + it)) for r in range(p)]),
                     f"all_gather after the input was dropped, round {it}")
        expect_equal(out2, torch.full((n,), float(sum(r * 10 + rank + it for r in range(p)))),
                     f"reduce_scatter after the inputs were dropped, round {it}")
    dist.barrier()
    dist.destroy_process_group()


def _mistakes(p):
    """(what, the offending rank's call, the others' call of the same collective): mistakes only
    the offending rank can see."""
    cases = [
        ("a list of the wrong length",
         lambda: dist.all_gather([torch.zeros(4) for _ in range(p + 1)], torch.zeros(4),
                                 async_op=True),
         lambda: dist.all_gather([torch.zeros(4) for _ in range(p)], torch.zeros(4),
                                 async_op=True)),
        ("MAX of complex tensors",
         lambda: dist.reduce_scatter_tensor(torch.zeros(2, dtype=torch.complex64),
                                            torch.zeros(2 * p, dtype=torch.complex64),
                                            op=dist.ReduceOp.MAX, async_op=True),
         lambda: dist.reduce_scatter_tensor(torch.zeros(2, dtype=torch.complex64),
                                            torch.zeros(2 * p, dtype=torch.complex64),
                                            async_op=True)),
        ("a reduce_scatter list of the wrong length",
         lambda: dist.reduce_scatter(torch.zeros(4), [torch.zeros(4)] * (p + 1), async_op=True),
         lambda: dist.reduce_scatter(torch.zeros(4), [torch.zeros(4)] * p, async_op=True)),
    ]
    if not TORCH2:  # torch 2.x refuses it in its dispatcher, before any backend sees it
        cases.append(("a sparse tensor in broadcast",
                      lambda: dist.broadcast(torch.zeros(4).to_sparse(), 0, async_op=True),
                      lambda: dist.broadcast(torch.zeros(4), 0, async_op=True)))
    if TORCH2:
        cases.append(("a large all_reduce of float8 among float32 ones",
                      lambda: dist.all_reduce(torch.zeros(1 << 20, dtype=torch.float8_e4m3fn),
                                              async_op=True),
                      lambda: dist.all_reduce(torch.zeros(1 << 20), async_op=True)))
    return cases


def case_mistakes():
    """One rank's mistake (that only it can see) raises at its call, and at every other rank's
    wait within a second, with the offender's words; the group stays in step: each mistake is
    caught and the next 100 all_reduce results are checked on every rank."""
    rank, p = init(timeout_s=60)
    bad = p - 1
    for what, bad_call, good_call in _mistakes(p):
        start = time.time()
        if rank == bad:
            try:
                bad_call()
            except (RuntimeError, ValueError) as e:
                assert "rdmacoll" in str(e), str(e)
            else:
                raise AssertionError(f"{what}: no error at the offending rank's call")
        else:
            work = good_call()
            try:
                work.wait()
            except RuntimeError as e:
                took = time.time() - start
                assert f"rank {bad} rejected its arguments" in str(e), (what, str(e))
                assert took < 1.5, f"{what}: raised after {took:.2f} s"
            else:
                raise AssertionError(f"{what}: no error on rank {rank}")
        for i in range(100):
            t = torch.full((7,), float(rank + i))
            dist.all_reduce(t)
            expect_equal(t, torch.full((7,), float(sum(r + i for r in range(p)))),
                         f"all_reduce {i} after {what}")
    dist.barrier()
    dist.destroy_process_group()


def case_shapes():
    """What NCCL and gloo accept: an all_gather_into_tensor output of any shape with p x the
    input's elements; strided (non-contiguous) and channels_last tensors, through a copy."""
    rank, p = init()
    every = [torch.arange(6, dtype=torch.float32) + 10 * r for r in range(p)]
    mine = every[rank].reshape(2, 3)
    odd = torch.zeros(3 * p, 2)  # neither (2p, 3) nor (p, 2, 3)
    dist.all_gather_into_tensor(odd, mine)
    expect_equal(odd.reshape(-1), torch.cat(every), "all_gather_into_tensor, any shape")
    # An output that is a strided view (every other element of a larger buffer).
    base = torch.full((2 * 6 * p,), -1.0)
    strided = base[::2]
    dist.all_gather_into_tensor(strided, every[rank])
    expect_equal(strided, torch.cat(every), "all_gather_into_tensor, strided output")
    expect_equal(base[1::2], torch.full((6 * p,), -1.0), "strided output: gaps untouched")
    # List all_gather into columns of a matrix (non-contiguous outputs).
    m = torch.zeros(6, p)
    dist.all_gather(list(m.unbind(1)), every[rank])
    expect_equal(m.t().reshape(-1), torch.cat(every), "all_gather into columns")
    # all_reduce of a transposed view and of a channels_last tensor.
    t = (torch.arange(12.).reshape(3, 4) + rank).t()
    dist.all_reduce(t)
    expect_equal(t, sum(torch.arange(12.).reshape(3, 4) + r for r in range(p)).t(),
                 "all_reduce of a transposed view")
    cl = (torch.arange(2 * 3 * 4 * 5.).reshape(2, 3, 4, 5) + rank).to(
        memory_format=torch.channels_last)
    dist.all_reduce(cl)
    expect_equal(cl, sum(torch.arange(2 * 3 * 4 * 5.).reshape(2, 3, 4, 5) + r for r in range(p)),
                 "all_reduce of a channels_last tensor")
    assert cl.is_contiguous(memory_format=torch.channels_last)
    b = (torch.arange(8.).reshape(2, 4) + rank).t()
    dist.broadcast(b, p - 1)
    expect_equal(b, (torch.arange(8.).reshape(2, 4) + p - 1).t(), "broadcast of a transposed view")
    out = torch.zeros(4, 3).t()  # a (3, 4) output that is not contiguous
    dist.reduce_scatter_tensor(out, torch.arange(12. * p) + rank)
    piece = sum(torch.arange(12. * p) + r for r in range(p))[rank * 12:(rank + 1) * 12]
    expect_equal(out, piece.reshape(3, 4), "reduce_scatter_tensor, strided output")
    dist.barrier()
    dist.destroy_process_group()


def case_sparse():
    """Sparse all_reduce as gloo does it: every rank's entries, summed."""
    rank, p = init()
    g = torch.Generator().manual_seed(7)
    dense = [torch.zeros(50, 3) for _ in range(p)]
    for r in range(p):
        rows = torch.randperm(50, generator=g)[:10 + r]
        dense[r][rows] = torch.randn(len(rows), 3, generator=g)
    t = dense[rank].to_sparse(1)
    dist.all_reduce(t)
    expect_equal(t.to_dense(), sum(dense), "sparse all_reduce")
    dist.barrier()
    dist.destroy_process_group()


def case_secondary():
    """rdmacoll groups under a gloo default group: one of all ranks, and two that overlap."""
    dist.init_process_group(backend="gloo", timeout=datetime.timedelta(seconds=120))
    rank, p = dist.get_rank(), dist.get_world_size()
    assert p >= 3
    whole = dist.new_group(backend="rdmacoll")
    g01 = dist.new_group([0, 1], backend="rdmacoll")
    g12 = dist.new_group([1, 2], backend="rdmacoll")
    assert dist.get_backend(whole) == "rdmacoll"
    for i in range(3):
        t = torch.full((1000,), float(rank + i))
        dist.all_reduce(t, group=whole)
        expect_equal(t, torch.full((1000,), float(sum(r + i for r in range(p)))), "whole")
        for ranks, g in (((0, 1), g01), ((1, 2), g12)):
            if rank in ranks:
                out = torch.zeros(2 * 3, dtype=torch.int64)
                dist.all_gather_into_tensor(out, torch.full((3,), rank + i), group=g)
                expect_equal(out, torch.tensor([r + i for r in ranks for _ in range(3)]),
                             f"group {ranks}")
        t = torch.full((5,), float(rank))
        dist.all_reduce(t)  # gloo, the default group
        expect_equal(t, torch.full((5,), float(sum(range(p)))), "gloo default group")
    dist.barrier()
    dist.destroy_process_group()


def case_teardown():
    """Destroying a subgroup (and then the world) while an async op on it still runs, with a
    Python callback chained on it: neither waits for the other forever (the GIL)."""
    rank, p = init(timeout_s=60)
    for i in range(3):
        sub = dist.new_group(list(range(p)))
        seen = []
        t = torch.full((1 << 20,), float(rank))
        fut = dist.all_reduce(t, group=sub, async_op=True).get_future().then(
            lambda f: seen.append(f.value()[0][0].item()))
        dist.destroy_process_group(sub)
        fut.wait()
        assert seen == [float(sum(range(p)))], seen
    t = torch.ones(1 << 20)
    last = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value())
    dist.destroy_process_group()
    last.wait()
    expect_equal(t, torch.full((1 << 20,), float(p)), "the world's last async op")


def case_dtypes2():
    """torch 2.x's newer dtypes move as bytes where data only moves: float8, uint16/32/64."""
    rank, p = init()
    for dt in (torch.float8_e4m3fn, torch.float8_e5m2, torch.uint16, torch.uint32, torch.uint64):
        src = (torch.arange(8, dtype=torch.float32) + rank).to(dt) if dt.is_floating_point \
            else (torch.arange(8) + rank).to(dt)
        every = [((torch.arange(8, dtype=torch.float32) + r).to(dt) if dt.is_floating_point
                  else (torch.arange(8) + r).to(dt)) for r in range(p)]
        out = torch.empty(p * 8, dtype=dt)
        dist.all_gather_into_tensor(out, src)
        assert torch.equal(out.view(torch.uint8), torch.cat(every).view(torch.uint8)), dt
        b = src.clone()
        dist.broadcast(b, 0)
        assert torch.equal(b.view(torch.uint8), every[0].view(torch.uint8)), dt
    dist.barrier()
    dist.destroy_process_group()


def case_coalesced():
    """_coalescing_manager (FSDP's and DeepSpeed's path) and all_reduce_coalesced: one call per
    batch, every result checked."""
    rank, p = init()
    cpu = torch.device("cpu")
    sizes = [3, 1000, 17]
    ins = [torch.arange(n, dtype=torch.float32) + rank for n in sizes]
    outs = [torch.zeros(p * n) for n in sizes]
    with dist._coalescing_manager(device=cpu, async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    cm.wait()
    for o, n in zip(outs, sizes):
        expect_equal(o, torch.cat([torch.arange(n, dtype=torch.float32) + r for r in range(p)]),
                     f"coalesced all_gather {n}")
    rs_in = [torch.arange(p * n, dtype=torch.float32) * (rank + 1) for n in sizes]
    rs_out = [torch.zeros(n) for n in sizes]
    with dist._coalescing_manager(device=cpu, async_ops=True) as cm:
        for o, i in zip(rs_out, rs_in):
            dist.reduce_scatter_tensor(o, i)
    cm.wait()
    total = sum(r + 1 for r in range(p))
    for o, n in zip(rs_out, sizes):
        expect_equal(o, (torch.arange(p * n, dtype=torch.float32) * total)[rank * n:(rank + 1) * n],
                     f"coalesced reduce_scatter {n}")
    ar = [torch.full((n,), float(rank)) for n in sizes]
    with dist._coalescing_manager(device=cpu, async_ops=True) as cm:
        for t in ar:
            dist.all_reduce(t)
    cm.wait()
    for t, n in zip(ar, sizes):
        expect_equal(t, torch.full((n,), float(sum(range(p)))), f"coalesced all_reduce {n}")
    two = [torch.full((5,), rank, dtype=torch.int64), torch.full((3, 2), rank, dtype=torch.int64)]
    dist.all_reduce_coalesced(two)
    expect_equal(two[0], torch.full((5,), sum(range(p)), dtype=torch.int64), "all_reduce_coalesced")
    expect_equal(two[1], torch.full((3, 2), sum(range(p)), dtype=torch.int64),
                 "all_reduce_coalesced")
    dist.barrier()
    dist.destroy_process_group()


def case_gather_coalesced():
    """all_gather_coalesced, the list-of-lists form (both torch lines): mixed shapes (torch wants
    one dtype), an empty input and strided outputs, in one call; every element checked."""
    rank, p = init()
    f64 = torch.float64
    gin = [torch.arange(7, dtype=f64) + rank, torch.full((2, 3), rank, dtype=f64),
           torch.empty(0, dtype=f64), torch.full((4,), rank + 1.5, dtype=f64)]
    # gout[r][k] receives rank r's input k; input 3's outputs are strided.
    gout = [[torch.empty_like(t) for t in gin[:3]] + [torch.zeros(4, 2, dtype=f64)[:, 0]]
            for _ in range(p)]
    dist.all_gather_coalesced(gout, gin)
    for r in range(p):
        expect_equal(gout[r][0], torch.arange(7, dtype=torch.float64) + r, "all_gather_coalesced")
        expect_equal(gout[r][1], torch.full((2, 3), r, dtype=f64), "all_gather_coalesced")
        assert gout[r][2].numel() == 0
        expect_equal(gout[r][3], torch.full((4,), r + 1.5, dtype=torch.float64),
                     "all_gather_coalesced (strided)")
    dist.barrier()
    dist.destroy_process_group()


def case_premul():
    """PREMUL_SUM as torch defines it: each input multiplied by the factor, then summed."""
    rank, p = init()
    op = dist._make_nccl_premul_sum(0.5)
    t = torch.full((9,), float(rank + 1))
    dist.all_reduce(t, op=op)
    expect_equal(t, torch.full((9,), 0.5 * sum(r + 1 for r in range(p))), "all_reduce PREMUL_SUM")
    out = torch.zeros(4)
    dist.reduce_scatter_tensor(out, torch.full((4 * p,), float(rank + 1)),
                               op=dist._make_nccl_premul_sum(torch.tensor([3.0])))
    expect_equal(out, torch.full((4,), 3.0 * sum(r + 1 for r in range(p))), "reduce_scatter PREMUL")
    dist.barrier()
    dist.destroy_process_group()


def case_profiler():
    """The profiler shows rdmacoll's collectives, named as gloo names its own."""
    rank, p = init()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        dist.all_reduce(torch.ones(10))
        dist.all_gather_into_tensor(torch.zeros(10 * p), torch.ones(10))
    names = {e.name for e in prof.events()}
    assert "rdmacoll:all_reduce" in names and "rdmacoll:all_gather_into_tensor" in names, \
        sorted(n for n in names if "rdmacoll" in n or "gloo" in n)
    dist.barrier()
    dist.destroy_process_group()


def rooted_in_blocks(rank, p):
    """gather into and scatter from lists that are one block of memory (used in place), with
    the root's own slot as its input or output; a block's views out of order, and a scatter
    output that overlaps another rank's slot, which must go through a copy."""
    root = p - 1
    for n in (1, 70000):
        want = [torch.arange(n, dtype=torch.float32) + 100000 * (r + 1) for r in range(p)]
        block = torch.full((p, n), 7.0)
        views = list(block.unbind(0))
        mine = views[rank].copy_(want[rank]) if rank == root else want[rank].clone()
        dist.gather(mine, views if rank == root else None, dst=root)
        if rank == root:
            expect_equal(block, torch.stack(want), f"gather into one block n={n}")
        backwards = torch.full((p, n), 7.0)
        out = list(backwards.unbind(0))[::-1]
        dist.gather(want[rank].clone(), out if rank == root else None, dst=root)
        if rank == root:
            for r in range(p):
                expect_equal(out[r], want[r], f"gather into reversed views n={n} chunk {r}")
        for mode in ("apart", "own slot", "overlapping"):
            src = torch.stack(want).flatten().clone()
            pieces = list(src.chunk(p))
            piece = torch.full((n,), 7.0)
            if rank == root and mode == "own slot":
                piece = pieces[root]
            elif rank == root and mode == "overlapping":
                piece = pieces[(root + 1) % p]
            dist.scatter(piece, pieces if rank == root else None, src=root)
            expect_equal(piece, want[rank], f"scatter from one block ({mode}) n={n}")
            if rank == root and mode != "overlapping":
                expect_equal(src, torch.stack(want).flatten(), f"scatter's list ({mode}) n={n}")


def case_rooted():
    """gather, scatter and reduce to every root in every dtype (and complex), 0 to 70000
    elements; the others' reduce tensors stay as they were; the object collectives built on
    them (gather_object, scatter_object_list, broadcast_object_list)."""
    rank, p = init()
    for dtype in DTYPES + [torch.complex64]:
        for n in (0, 1, 1000, 70000):
            root = n % p
            mine = values(rank, n, dtype) if dtype != torch.complex64 else \
                torch.complex(values(rank, n, torch.float32), values(rank, n, torch.float32, 1))
            want = [values(r, n, dtype) if dtype != torch.complex64 else
                    torch.complex(values(r, n, torch.float32), values(r, n, torch.float32, 1))
                    for r in range(p)]
            out = [torch.full_like(mine, 7) for _ in range(p)] if rank == root else None
            dist.gather(mine, out, dst=root)
            if rank == root:
                for r in range(p):
                    expect_equal(out[r], want[r], f"gather {dtype} n={n} chunk {r}")
            piece = torch.full_like(mine, 7)
            dist.scatter(piece, want if rank == root else None, src=root)
            expect_equal(piece, want[rank], f"scatter {dtype} n={n}")
            for op in ops_for(dtype) if dtype != torch.complex64 else [dist.ReduceOp.SUM]:
                t = mine.clone()
                dist.reduce(t, dst=root, op=op)
                expect_equal(t, reduce_ref(want, op) if rank == root else mine,
                             f"reduce {dtype} {op} n={n} on rank {rank}")
    rooted_in_blocks(rank, p)
    objs = [{"rank": r, "list": list(range(r))} for r in range(p)]
    gathered = [None] * p if rank == 0 else None
    dist.gather_object(objs[rank], gathered, dst=0)
    assert rank != 0 or gathered == objs, gathered
    got = [None]
    dist.scatter_object_list(got, objs if rank == p - 1 else None, src=p - 1)
    assert got[0] == objs[rank], got
    shared = [objs[1], "two", 3] if rank == 1 else [None, None, None]
    dist.broadcast_object_list(shared, src=1)
    assert shared == [objs[1], "two", 3], shared
    dist.barrier()
    dist.destroy_process_group()


def case_alltoall():
    """all_to_all_single with equal splits and with random uneven splits (zeros among them)
    every step, as a mixture of experts exchanges tokens, equal to gloo's; all_to_all of lists;
    the gradient of dist.nn.all_gather (which torch computes with all_to_all off NCCL)."""
    rank, p = init()
    gloo = dist.new_group(backend="gloo")
    g = torch.Generator().manual_seed(1234)  # the same splits on every rank
    for step in range(20):
        counts = torch.randint(0, 6, (p, p), generator=g)  # counts[i][j]: rows i sends j
        width = (1, 8, 3000)[step % 3]
        x = torch.randn(int(counts[rank].sum()), width, generator=torch.Generator().manual_seed(
            rank * 100 + step))
        out_rows = int(counts[:, rank].sum())
        a = torch.full((out_rows, width), 7.0)
        b = torch.full((out_rows, width), 8.0)
        ins, outs = counts[rank].tolist(), counts[:, rank].tolist()
        dist.all_to_all_single(a, x, outs, ins)
        dist.all_to_all_single(b, x, outs, ins, group=gloo)
        assert torch.equal(a, b), f"all_to_all_single vs gloo, step {step}"
    for dtype in DTYPES:
        x = values(rank, 4 * p, dtype).view(p, 4)
        y = torch.zeros_like(x)
        dist.all_to_all_single(y, x)
        for i in range(p):
            expect_equal(y[i], values(i, 4 * p, dtype).view(p, 4)[rank], f"equal {dtype}")
    ins = [torch.full((r + rank + 1,), float(rank * 10 + r)) for r in range(p)]
    outs = [torch.zeros(rank + r + 1) for r in range(p)]
    dist.all_to_all(outs, ins)
    for r in range(p):
        expect_equal(outs[r], torch.full((rank + r + 1,), float(r * 10 + rank)), "all_to_all")
    import torch.distributed.nn as dnn
    w = torch.full((3,), float(rank + 1), requires_grad=True)
    gathered = dnn.all_gather(w * 2)
    loss = sum((k + 1) * t.sum() for k, t in enumerate(gathered))
    loss.backward()
    # d loss / d w: every rank's loss weights our piece by (rank + 1), times 2, summed over p.
    expect_equal(w.grad, torch.full((3,), 2.0 * p * (rank + 1)), "dist.nn.all_gather gradient")
    dist.barrier()
    dist.destroy_process_group()


def case_p2p():
    """send and recv in every dtype, 0 to 300000 elements; isend/irecv under several tags
    received in another order; recv from any source (which returns the sender); batch_isend_irecv
    around a ring; send_object_list/recv_object_list; sizes that differ raise."""
    rank, p = init()
    nxt, prv = (rank + 1) % p, (rank + p - 1) % p
    for dtype in DTYPES:
        for n in (0, 1, 1000, 300000):
            mine = values(rank, n, dtype)
            got = torch.zeros_like(mine)
            if rank % 2 == 0:
                dist.send(mine, nxt)
                dist.recv(got, prv)
            else:
                dist.recv(got, prv)
                dist.send(mine, nxt)
            expect_equal(got, values(prv, n, dtype), f"ring {dtype} n={n}")
    # Tags: rank 0 sends under tags 0..3, rank 1 receives them 3..0.
    if rank == 0:
        works = [dist.isend(values(0, 50000, torch.float32, salt=t), 1, tag=t) for t in range(4)]
        for w in works:
            w.wait()
    elif rank == 1:
        for t in reversed(range(4)):
            x = torch.zeros(50000)
            dist.irecv(x, 0, tag=t).wait()
            expect_equal(x, values(0, 50000, torch.float32, salt=t), f"tag {t}")
    dist.barrier()
    # From any source: rank 0 takes one message from each other rank, in whatever order.
    if rank == 0:
        seen = set()
        for _ in range(p - 1):
            x = torch.zeros(1000)
            src = dist.recv(x)
            assert src not in seen and 0 < src < p, src
            seen.add(src)
            expect_equal(x, values(src, 1000, torch.float32), f"any source {src}")
    else:
        dist.send(values(rank, 1000, torch.float32), 0)
    # A recv from any source matches any sender's next message under its tag, the batch's
    # included (as in MPI): rank 0 takes the batch's only after every rank has sent its one.
    dist.barrier()
    # A batch around the ring, in both directions.
    a, b = torch.zeros(70000), torch.zeros(70000)
    ops = [dist.P2POp(dist.isend, values(rank, 70000, torch.float32), nxt),
           dist.P2POp(dist.irecv, a, prv),
           dist.P2POp(dist.isend, values(rank, 70000, torch.float32, salt=1), prv),
           dist.P2POp(dist.irecv, b, nxt)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    expect_equal(a, values(prv, 70000, torch.float32), "batch from the left")
    expect_equal(b, values(nxt, 70000, torch.float32, salt=1), "batch from the right")
    if not hasattr(dist, "send_object_list"):  # torch 2.x
        pass
    elif rank == 0:
        dist.send_object_list([{"step": 3}, "x" * 100000], dst=1)
    elif rank == 1:
        objs = [None, None]
        dist.recv_object_list(objs, src=0)
        assert objs == [{"step": 3}, "x" * 100000], str(objs)[:80]
    # Sizes that differ: the receiver raises (and so does a sender waiting to be cleared).
    if rank == 0:
        try:
            dist.send(torch.zeros(100000), 1)
            raise AssertionError("no error")
        except RuntimeError as e:
            assert "sizes must agree" in str(e), e
    elif rank == 1:
        try:
            dist.recv(torch.zeros(10), 0)
            raise AssertionError("no error")
        except RuntimeError as e:
            assert "sizes must agree" in str(e), e
    dist.barrier()
    dist.destroy_process_group()


def case_gpipe():
    """A hand-written GPipe loop (isend/irecv of activations forward, gradients backward, 4
    microbatches) training one Linear+GELU stage per rank for 5 steps, against gloo from the
    same seed: the parameters agree."""
    rank, p = init()
    gloo = dist.new_group(backend="gloo")

    def run(group):
        torch.manual_seed(0)
        stages = [torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU()) for _ in range(p)]
        mod = stages[rank]
        opt = torch.optim.SGD(mod.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(7)
        for _ in range(5):
            x, target = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
            opt.zero_grad()
            ins, outs = [], []
            for m in range(4):  # forward: every microbatch down the pipe
                if rank == 0:
                    inp = x[2 * m:2 * m + 2].clone()
                else:
                    inp = torch.zeros(2, 16)
                    dist.irecv(inp, rank - 1, group=group, tag=m).wait()
                inp.requires_grad_(rank > 0)
                out = mod(inp)
                if rank < p - 1:
                    dist.isend(out.detach(), rank + 1, group=group, tag=m).wait()
                ins.append(inp)
                outs.append(out)
            for m in reversed(range(4)):  # backward: gradients up the pipe
                if rank == p - 1:
                    torch.nn.functional.mse_loss(outs[m], target[2 * m:2 * m + 2]).backward()
                else:
                    grad = torch.zeros(2, 16)
                    dist.irecv(grad, rank + 1, group=group, tag=100 + m).wait()
                    outs[m].backward(grad)
                if rank > 0:
                    dist.isend(ins[m].grad, rank - 1, group=group, tag=100 + m).wait()
            opt.step()
        return [t.detach().clone() for t in mod.parameters()]

    for a, b in zip(run(dist.group.WORLD), run(gloo)):
        assert torch.allclose(a, b, atol=1e-6, rtol=0), (a - b).abs().max()
    dist.barrier()
    dist.destroy_process_group()


def case_symmetric():
    """all_gather_into_tensor into rdmacoll_torch.empty's symmetric memory, out of place and in
    place, flat and stacked, equal to gloo's; all_reduce on it and reduce_scatter_tensor from it,
    equal to gloo's (up to the order of the sums); broadcast of it; on a subgroup too."""
    rank, p = init()
    gloo = dist.new_group(backend="gloo")
    n = 100000  # 400 KB of float32: past the inline limit
    flat = rdmacoll_torch.empty(p * n)
    stacked = rdmacoll_torch.empty((p, n), dtype=torch.float32)
    assert flat.shape == (p * n,) and stacked.shape == (p, n) and flat.dtype == torch.float32
    for step in range(6):
        x = torch.randn(n, generator=torch.Generator().manual_seed(rank * 100 + step))
        out = flat if step % 2 == 0 else stacked
        out.fill_(-1)
        dist.all_gather_into_tensor(out, x)
        want = torch.empty(p * n)
        dist.all_gather(list(want.chunk(p)), x, group=gloo)  # 1.13's gloo has no tensor form
        assert torch.equal(out.view(-1), want), f"symmetric all_gather, step {step}"
    own = flat[rank * n:(rank + 1) * n]
    own.copy_(torch.full((n,), float(rank)))
    dist.all_gather_into_tensor(flat, own)
    for r in range(p):
        expect_equal(flat[r * n:(r + 1) * n], torch.full((n,), float(r)), "in place")
    t = rdmacoll_torch.empty(n + 1, dtype=torch.float64)
    t.copy_(torch.randn(n + 1, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(rank)))
    want = t.clone()
    dist.all_reduce(t)
    dist.all_reduce(want, group=gloo)
    assert torch.allclose(t, want, rtol=1e-12, atol=1e-12), "symmetric all_reduce vs gloo"
    b = rdmacoll_torch.empty(n + 5, dtype=torch.float64)
    b.copy_(torch.arange(n + 5, dtype=torch.float64) if rank == 1 else torch.full((n + 5,), -1.0,
                                                                                  dtype=torch.float64))
    dist.broadcast(b, src=1)
    expect_equal(b, torch.arange(n + 5, dtype=torch.float64), "symmetric broadcast")
    src = rdmacoll_torch.empty(p * n, dtype=torch.float64)
    src.copy_(torch.randn(p * n, dtype=torch.float64,
                          generator=torch.Generator().manual_seed(rank + 7)))
    whole = src.clone()
    dist.all_reduce(whole, group=gloo)  # 1.13's gloo has no reduce_scatter
    piece = torch.empty(n, dtype=torch.float64)
    dist.reduce_scatter_tensor(piece, src)
    assert torch.allclose(piece, whole[rank * n:(rank + 1) * n], rtol=1e-12, atol=1e-12), \
        "symmetric reduce_scatter vs gloo"
    sub = dist.new_group(list(range(1, p)))
    if rank >= 1:
        out = rdmacoll_torch.empty((p - 1) * n, group=sub)
        dist.all_gather_into_tensor(out, torch.full((n,), float(rank)), group=sub)
        for r in range(1, p):
            expect_equal(out[(r - 1) * n:r * n], torch.full((n,), float(r)), "subgroup")
    dist.barrier()
    dist.destroy_process_group()


def case_staging():
    """List all_gather, gather and all_to_all stage through buffers kept across calls: many in
    flight at once, of several sizes and dtypes, each right in every element; a list that is one
    block (`list(t.chunk(p))`, the input its own slot) is written in place; again and again, so
    the kept buffers are reused."""
    rank, p = init()
    for rnd in range(4):
        pending = []
        for k, (n, dtype) in enumerate([(1000, torch.float32), (70000, torch.int64),
                                        (300000, torch.float32), (1, torch.int32)]):
            x = values(rank, n, dtype, salt=rnd * 10 + k)
            outs = [torch.full((n,), -1).to(dtype) for _ in range(p)]
            pending.append((dist.all_gather(outs, x, async_op=True), outs,
                            [values(r, n, dtype, salt=rnd * 10 + k) for r in range(p)],
                            f"all_gather list round {rnd} call {k}"))
            gl = [torch.full((n,), -1).to(dtype) for _ in range(p)] if rank == k % p else None
            w = dist.gather(x, gl, dst=k % p, async_op=True)
            if gl is not None:
                pending.append((w, gl, [values(r, n, dtype, salt=rnd * 10 + k)
                                        for r in range(p)], f"gather round {rnd} call {k}"))
            else:
                pending.append((w, [], [], ""))
            ins = [values(rank, n, dtype, salt=100 * j + rnd) for j in range(p)]
            a2a = [torch.full((n,), -1).to(dtype) for _ in range(p)]
            pending.append((dist.all_to_all(a2a, ins, async_op=True), a2a,
                            [values(r, n, dtype, salt=100 * rank + rnd) for r in range(p)],
                            f"all_to_all round {rnd} call {k}"))
        for w, got, want, what in pending:
            w.wait()
            for r in range(len(want)):
                expect_equal(got[r], want[r], f"{what}, rank {r}'s part")
        # One block, the input its own slot: no staging, nothing copied.
        n = 5000
        block = torch.full((p * n,), -1.0)
        own = block[rank * n:(rank + 1) * n]
        own.copy_(values(rank, n, torch.float32, salt=rnd))
        dist.all_gather(list(block.chunk(p)), own)
        for r in range(p):
            expect_equal(block[r * n:(r + 1) * n], values(r, n, torch.float32, salt=rnd),
                         f"all_gather into one block, round {rnd}, rank {r}'s part")
    dist.destroy_process_group()


if __name__ == "__main__":
    name = sys.argv[1]
    globals()["case_" + name]()
    print(f"ok {name}", flush=True)
