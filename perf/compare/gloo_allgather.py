"""torch.distributed all_gather with the gloo backend, the torch peer in perf/compare.

torch 1.13's gloo backend has no all_gather_into_tensor, so this gathers with all_gather into
views of one pre-allocated output tensor (the same memory layout). Launched by rdmacoll-run
(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE). Rank 0 prints "RESULT <bytes> <mean us> <wrong>".
Run with /usr/bin/python3 (Debian's python3-torch).
"""
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    nbytes, iters, warmup = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    n = max(nbytes, 1)
    inp = ((torch.arange(n, dtype=torch.int64) + rank * 7) % 256).to(torch.uint8)[:nbytes]
    out = torch.zeros(world * nbytes, dtype=torch.uint8)
    views = list(out.view(world, nbytes)) if nbytes else [torch.zeros(0, dtype=torch.uint8)] * world
    for _ in range(warmup):
        dist.all_gather(views, inp)
    total = 0.0
    for _ in range(iters):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_gather(views, inp)
        total += time.perf_counter() - t0
    expect = torch.cat([((torch.arange(n, dtype=torch.int64) + r * 7) % 256).to(torch.uint8)[:nbytes]
                        for r in range(world)])
    wrong = int((out != expect).sum())
    stats = torch.tensor([total / iters * 1e6, float(wrong)], dtype=torch.float64)
    gathered = [torch.zeros(2, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(gathered, stats)
    if rank == 0:
        print(f"RESULT {nbytes} {max(g[0].item() for g in gathered):.3f} "
              f"{int(sum(g[1].item() for g in gathered))}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main()
