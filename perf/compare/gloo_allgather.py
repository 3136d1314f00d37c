"""torch.distributed collectives, the torch rows of perf/compare: with the gloo backend (the
default), or with TORCH_BACKEND=rdmacoll (rdmacoll's torch backend, for the Python layer's
cost). The fourth argument picks the call: none for the all-gather, "allreduce"
(dist.all_reduce, float32 SUM), "reducescatter" (dist.reduce_scatter_tensor, float32 SUM; the
size is the input's bytes), "broadcast" (dist.broadcast from rank 0), "reduce" (dist.reduce to
rank 0, float32 SUM), "sendrecv" (batch_isend_irecv: to rank+1, from rank-1), "alltoall"
(dist.all_to_all_single, equal splits), "gather" (to rank 0) and "scatter" (from rank 0) of
float32 pieces (the size is one rank's whole input, or the root's whole tensor: p pieces).

torch 1.13's gloo backend has no all_gather_into_tensor, so with gloo this gathers with
all_gather into views of one pre-allocated output tensor (the same memory layout); rdmacoll
runs all_gather_into_tensor. Launched by rdmacoll-run
(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE). Rank 0 prints "RESULT <bytes> <mean us> <wrong>".
Timing as nccl-tests does (and every row of perf/compare): after the warm-up, one barrier, then
ITERS calls back to back; a rank's mean is the elapsed time over ITERS.
Run with /usr/bin/python3 (Debian's python3-torch), or a venv's python for torch 2.x (whose gloo
has all_gather_into_tensor and reduce_scatter_tensor).
"""
import os
import sys
import time

import torch
import torch.distributed as dist


def time_back_to_back(call, iters):
    """One barrier, then `iters` calls back to back: the elapsed seconds."""
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        call()
    return time.perf_counter() - t0


def all_reduce(nbytes, iters, warmup, rank, world):
    """dist.all_reduce (float32 SUM, in place), the torch peer of rdmacoll's all_reduce."""
    n = nbytes // 4
    t = torch.zeros(n, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(t)
    total = time_back_to_back(lambda: dist.all_reduce(t), iters)
    idx = torch.arange(n, dtype=torch.int64)
    t = ((idx + rank) % 5).to(torch.float32)
    dist.all_reduce(t)
    expect = sum(((idx + r) % 5).to(torch.float32) for r in range(world))
    return total, int((t != expect).sum())


def broadcast(nbytes, iters, warmup, rank):
    """dist.broadcast from rank 0, the torch peer of rdmacoll's broadcast."""
    t = torch.zeros(nbytes, dtype=torch.uint8)
    for _ in range(warmup):
        dist.broadcast(t, 0)
    total = time_back_to_back(lambda: dist.broadcast(t, 0), iters)
    expect = ((torch.arange(nbytes, dtype=torch.int64) * 7) % 256).to(torch.uint8)
    t = expect.clone() if rank == 0 else torch.zeros(nbytes, dtype=torch.uint8)
    dist.broadcast(t, 0)
    return total, int((t != expect).sum())


def reduce_scatter(nbytes, iters, warmup, rank, world):
    """dist.reduce_scatter_tensor (float32 SUM) of an input of nbytes (whole floats per rank)."""
    m = max(1, nbytes // 4 // world)
    inp = torch.zeros(world * m, dtype=torch.float32)
    out = torch.zeros(m, dtype=torch.float32)
    for _ in range(warmup):
        dist.reduce_scatter_tensor(out, inp)
    total = time_back_to_back(lambda: dist.reduce_scatter_tensor(out, inp), iters)
    idx = torch.arange(world * m, dtype=torch.int64)
    inp = ((idx + rank) % 5).to(torch.float32)
    dist.reduce_scatter_tensor(out, inp)
    expect = sum(((idx + r) % 5).to(torch.float32) for r in range(world))[rank * m:(rank + 1) * m]
    return total, int((out != expect).sum())


def own(r, n):
    """Rank r's data: exact floats, distinct per rank and position."""
    return ((torch.arange(n, dtype=torch.int64) + r * 7) % 61).to(torch.float32)


def piece(src, dst, m):
    """The piece rank src sends rank dst in the all-to-all."""
    return own(src * 5 + dst, m)


def more_modes(mode, nbytes, iters, warmup, rank, world):
    """reduce, sendrecv, alltoall, gather, scatter: the calls issue 24 added."""
    pieces = mode in ("alltoall", "gather", "scatter")
    m = max(1, nbytes // 4 // world) if pieces else nbytes // 4
    total = m * world if pieces else m
    nxt, prv = (rank + 1) % world, (rank + world - 1) % world
    if mode == "alltoall":
        inp = torch.cat([piece(rank, j, m) for j in range(world)])
    elif mode == "scatter":
        inp = torch.cat([own(j, m) for j in range(world)])
    elif mode == "reduce":
        inp = ((torch.arange(m, dtype=torch.int64) + rank) % 5).to(torch.float32)
    else:
        inp = own(rank, m)
    out = torch.full((m if mode == "scatter" else total,), 99.0)
    views = list(out.view(world, m)) if mode == "gather" else None

    def call():
        if mode == "reduce":
            dist.reduce(inp, 0)
        elif mode == "sendrecv":
            for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, inp, nxt),
                                             dist.P2POp(dist.irecv, out, prv)]):
                w.wait()
        elif mode == "alltoall":
            dist.all_to_all_single(out, inp)
        elif mode == "gather":
            dist.gather(inp, views if rank == 0 else None, dst=0)
        else:
            dist.scatter(out, list(inp.view(world, m)) if rank == 0 else None, src=0)

    for _ in range(warmup):
        call()
    total_s = time_back_to_back(call, iters)
    if mode == "reduce":
        inp.copy_(((torch.arange(m, dtype=torch.int64) + rank) % 5).to(torch.float32))
    out.fill_(99.0)
    call()
    if mode == "reduce":
        expect = sum(((torch.arange(m, dtype=torch.int64) + r) % 5).to(torch.float32)
                     for r in range(world))
        wrong = int((inp != expect).sum()) if rank == 0 else 0
    elif mode == "sendrecv":
        wrong = int((out != own(prv, m)).sum())
    elif mode == "alltoall":
        wrong = int((out != torch.cat([piece(j, rank, m) for j in range(world)])).sum())
    elif mode == "gather":
        expect = torch.cat([own(j, m) for j in range(world)])
        wrong = int((out != expect).sum()) if rank == 0 else 0
    else:
        wrong = int((out != own(rank, m)).sum())
    return total * 4, total_s, wrong


def main():
    nbytes, iters, warmup = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    backend = os.environ.get("TORCH_BACKEND", "gloo")
    if backend == "rdmacoll":
        import rdmacoll_torch  # noqa: F401  registers the backend
    dist.init_process_group(backend, init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    mode = sys.argv[4] if len(sys.argv) > 4 else ""
    if mode in ("reduce", "sendrecv", "alltoall", "gather", "scatter"):
        size, total, wrong = more_modes(mode, nbytes, iters, warmup, rank, world)
        report(size, iters, total, wrong, world)
        dist.destroy_process_group()
        return
    if mode in ("allreduce", "broadcast", "reducescatter"):
        total, wrong = (all_reduce(nbytes, iters, warmup, rank, world) if mode == "allreduce"
                        else reduce_scatter(nbytes, iters, warmup, rank, world)
                        if mode == "reducescatter" else broadcast(nbytes, iters, warmup, rank))
        report(nbytes, iters, total, wrong, world)
        dist.destroy_process_group()
        return
    n = max(nbytes, 1)
    inp = ((torch.arange(n, dtype=torch.int64) + rank * 7) % 256).to(torch.uint8)[:nbytes]
    out = torch.zeros(world * nbytes, dtype=torch.uint8)
    views = list(out.view(world, nbytes)) if nbytes else [torch.zeros(0, dtype=torch.uint8)] * world

    # torch 1.13's gloo has no all_gather_into_tensor; 2.x's has.
    views_only = backend == "gloo" and torch.__version__.startswith("1.")

    def gather():
        if views_only:
            dist.all_gather(views, inp)
        else:
            dist.all_gather_into_tensor(out, inp)

    for _ in range(warmup):
        gather()
    total = time_back_to_back(lambda: gather(), iters)
    expect = torch.cat([((torch.arange(n, dtype=torch.int64) + r * 7) % 256).to(torch.uint8)[:nbytes]
                        for r in range(world)])
    wrong = int((out != expect).sum())
    report(nbytes, iters, total, wrong, world)
    dist.destroy_process_group()


def report(nbytes, iters, total, wrong, world):
    """Rank 0 prints the slowest rank's mean and the wrong elements of all ranks."""
    stats = torch.tensor([total / iters * 1e6, float(wrong)], dtype=torch.float64)
    gathered = [torch.zeros(2, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(gathered, stats)
    if dist.get_rank() == 0:
        print(f"RESULT {nbytes} {max(g[0].item() for g in gathered):.3f} "
              f"{int(sum(g[1].item() for g in gathered))}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main()
