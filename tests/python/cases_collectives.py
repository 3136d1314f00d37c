"""Cases: every collective, op and dtype on the world and on subgroups, async work, gloo's
results as the reference, shapes, sparse tensors, coalesced calls and the profiler."""
import torch
import torch.distributed as dist

from case_support import DTYPES, init, values, expect_equal, reduce_ref, ops_for


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
