"""Cases: the rooted collectives (gather, scatter, reduce), all-to-all and point-to-point."""
import torch
import torch.distributed as dist

from case_support import DTYPES, init, values, expect_equal, reduce_ref, ops_for


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
    # A small send has completed when its receiver refuses it: the sender raises at its next
    # send to that rank (after the acknowledgement, sent behind the refusal).
    if rank == 0:
        dist.send(torch.zeros(5), 1, tag=3)
        dist.recv(torch.zeros(1), 1, tag=4)
        try:
            dist.send(torch.zeros(5), 1, tag=3)
            raise AssertionError("no error")
        except RuntimeError as e:
            assert "was then refused there" in str(e) and "sizes must agree" in str(e), e
    elif rank == 1:
        try:
            dist.recv(torch.zeros(10), 0, tag=3)
            raise AssertionError("no error")
        except RuntimeError as e:
            assert "sizes must agree" in str(e), e
        dist.send(torch.zeros(1), 0, tag=4)
    dist.barrier()
    dist.destroy_process_group()
