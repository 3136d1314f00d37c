"""Cases: symmetric memory (rdmacoll_torch.empty) and staged inputs."""
import torch
import torch.distributed as dist

import rdmacoll_torch
from case_support import init, values, expect_equal


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
