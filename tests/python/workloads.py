"""torch 2.x workloads on rdmacoll, each against gloo from the same seed in the same processes
(rdmacoll the default group, gloo a group of all ranks): the parameters after the steps agree to
1e-6. Run by every rank under a launcher; prints "ok <case>" at the end.
    rdmacoll-run -n 4 .venv/bin/python workloads.py fsdp2
"""
import datetime
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import rdmacoll_torch  # noqa: F401  registers backend="rdmacoll"


def init():
    dist.init_process_group(backend="rdmacoll", timeout=datetime.timedelta(seconds=120))
    gloo = dist.new_group(backend="gloo")
    return dist.get_rank(), dist.get_world_size(), gloo


def same(ours, theirs, what, atol=1e-6):
    for (name, a), b in zip(ours, theirs):
        if not torch.allclose(a, b, atol=atol, rtol=0):
            raise AssertionError(f"{what}: {name} differs from gloo's by "
                                 f"{(a - b).abs().max().item()}")


class Block(nn.Module):
    """A small transformer block: attention and an MLP, each behind a LayerNorm."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def model(dim=32):
    torch.manual_seed(0)
    return nn.Sequential(Block(dim), Block(dim), nn.Linear(dim, 8))


def batches(rank, steps=10, dim=32):
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(4, 6, dim, generator=g), torch.randn(4, 6, 8, generator=g))
            for _ in range(steps)]


def case_fsdp2():
    """FSDP2 fully_shard on a CPU DeviceMesh: the all_gather_into_tensor and
    reduce_scatter_tensor path, 10 steps of SGD with momentum (Adam's normalisation would turn
    the last bit of a sum taken in another order into 1e-3 on near-zero gradients)."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    rank, p, gloo = init()

    def train(group):
        mesh = DeviceMesh.from_group(group, "cpu")
        m = model()
        for block in m[:2]:
            fully_shard(block, mesh=mesh)
        fully_shard(m, mesh=mesh)
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        for x, y in batches(rank):
            F.mse_loss(m(x), y).backward()
            opt.step()
            opt.zero_grad()
        return [(n, q.full_tensor() if isinstance(q, DTensor) else q) for n, q in
                m.named_parameters()]

    ours = train(dist.group.WORLD)
    theirs = [q for _, q in train(gloo)]
    same(ours, theirs, "FSDP2")


def case_fsdp2_symmetric():
    """FSDP2 with its all-gather outputs and reduce-scatter inputs allocated by the group
    (set_allocate_memory_from_process_group_for_comm): rdmacoll hands out symmetric memory, where
    those calls take the one-copy path. Training equals gloo's, and the hook was used."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    rank, p, gloo = init()
    cpu = torch.device("cpu")
    ours_pg = dist.group.WORLD._get_backend(cpu)
    assert ours_pg.supports_tensor_alloc(cpu)
    # allocate_tensor by hand: symmetric memory an all_gather_into_tensor fills as gloo's does.
    n = 50000
    out = ours_pg.allocate_tensor(p * n, dtype=torch.float32, device=cpu)
    assert out.shape == (p * n,) and out.dtype == torch.float32
    x = torch.randn(n, generator=torch.Generator().manual_seed(rank))
    dist.all_gather_into_tensor(out, x)
    want = torch.empty(p * n)
    dist.all_gather_into_tensor(want, x, group=gloo)
    assert torch.equal(out, want), "all_gather into allocate_tensor's memory"

    allocated = []
    backend_type = type(ours_pg)
    plain = backend_type.allocate_tensor

    def counting(self, size, *, dtype, device):
        allocated.append(size)
        return plain(self, size, dtype=dtype, device=device)

    dim = 128  # 0.8 MB of parameters per block: past the inline limit, where windows count

    def train(group, hook):
        mesh = DeviceMesh.from_group(group, "cpu")
        m = model(dim)
        for block in m[:2]:
            fully_shard(block, mesh=mesh)
        fully_shard(m, mesh=mesh)
        if hook:
            for module in (*m[:2], m):
                module.set_allocate_memory_from_process_group_for_comm(True)
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        for x, y in batches(rank, dim=dim):
            F.mse_loss(m(x), y).backward()
            opt.step()
            opt.zero_grad()
        return [(n, q.full_tensor() if isinstance(q, DTensor) else q) for n, q in
                m.named_parameters()]

    backend_type.allocate_tensor = counting
    try:
        ours = train(dist.group.WORLD, True)
    finally:
        backend_type.allocate_tensor = plain
    assert len(allocated) > 0, "FSDP2 never asked rdmacoll for its buffers"
    theirs = [q for _, q in train(gloo, False)]
    same(ours, theirs, "FSDP2 on symmetric memory")


def case_fsdp1():
    """FSDP1 (FullyShardedDataParallel) with device_id=cpu, 10 steps of SGD."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    rank, p, gloo = init()

    def train(group):
        m = FSDP(model(), process_group=group, device_id=torch.device("cpu"),
                 use_orig_params=True)
        opt = torch.optim.SGD(m.parameters(), lr=0.05)
        for x, y in batches(rank):
            F.mse_loss(m(x), y).backward()
            opt.step()
            opt.zero_grad()
        with FSDP.summon_full_params(m):
            return [(n, q.detach().clone()) for n, q in m.named_parameters()]

    ours = train(None)
    theirs = [q for _, q in train(gloo)]
    same(ours, theirs, "FSDP1")


def case_ddp():
    """DDP: find_unused_parameters, no_sync (gradient accumulation), a communication hook
    (fp16 compression) and ZeroRedundancyOptimizer, each 10 steps."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, p, gloo = init()

    class Branchy(nn.Module):
        def __init__(self, unused):
            super().__init__()
            self.body = model()
            # Never in the graph: DDP needs find_unused_parameters for it.
            self.unused = nn.Linear(8, 8) if unused else None

        def forward(self, x):
            return self.body(x)

    def train(group, variant):
        torch.manual_seed(0)
        net = Branchy(variant == "unused")
        ddp = DDP(net, process_group=group, find_unused_parameters=(variant == "unused"))
        if variant == "hook":
            ddp.register_comm_hook(group, default_hooks.fp16_compress_hook)
        if variant == "zero":
            opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.SGD,
                                          lr=0.05, process_group=group)
        else:
            opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        for i, (x, y) in enumerate(batches(rank)):
            if variant == "no_sync" and i % 2 == 0:
                with ddp.no_sync():
                    F.mse_loss(ddp(x), y).backward()
                continue
            F.mse_loss(ddp(x), y).backward()
            opt.step()
            opt.zero_grad()
        return list(net.named_parameters())

    for variant in ("unused", "no_sync", "hook", "zero"):
        ours = train(None, variant)
        theirs = [q for _, q in train(gloo, variant)]
        same(ours, theirs, f"DDP {variant}", atol=1e-6 if variant != "hook" else 1e-3)


def case_ddp_sparse():
    """DDP with a sparse embedding (nn.Embedding(sparse=True)): sparse all_reduce, as gloo."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, p, gloo = init()

    def train(group):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Embedding(100, 16, sparse=True), nn.Linear(16, 4))
        ddp = DDP(net, process_group=group)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(rank)
        for _ in range(10):
            idx = torch.randint(0, 100, (8, 5), generator=g)
            F.mse_loss(ddp(idx).sum(1), torch.ones(8, 4)).backward()
            opt.step()
            opt.zero_grad()
        return list(net.named_parameters())

    same(train(None), [q for _, q in train(gloo)], "DDP with a sparse embedding")


def case_dtensor():
    """DTensor redistribute (Shard to Replicate: all_gather; Partial to Shard: reduce_scatter;
    Partial to Replicate: all_reduce) and the functional collectives, eager and compiled
    (aot_eager), against gloo's mesh."""
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

    rank, p, gloo = init()

    def run(group):
        mesh = DeviceMesh.from_group(group, "cpu")
        g = torch.Generator().manual_seed(rank)
        local = torch.randn(3, 5, generator=g)
        out = []
        d = DTensor.from_local(local, mesh, [Shard(0)])
        out.append(d.redistribute(mesh, [Replicate()]).to_local())
        part = DTensor.from_local(torch.randn(2 * p, 5, generator=g), mesh, [Partial()])
        out.append(part.redistribute(mesh, [Shard(0)]).to_local())
        out.append(part.redistribute(mesh, [Replicate()]).to_local())
        x = torch.randn(7, generator=g)
        out.append(funcol.all_gather_tensor(x, 0, mesh))
        out.append(funcol.all_reduce(x, "sum", mesh))
        out.append(funcol.reduce_scatter_tensor(torch.randn(p * 3, generator=g), "sum", 0, mesh))

        @torch.compile(backend="aot_eager", fullgraph=True)
        def step(t):
            return funcol.all_reduce(t * 2, "sum", mesh) + 1

        out.append(step(x))
        # distribute_tensor shards a full tensor from the mesh's first rank: a scatter.
        from torch.distributed.tensor import distribute_tensor
        full = torch.randn(2 * p, 3, generator=torch.Generator().manual_seed(5))
        out.append(distribute_tensor(full, mesh, [Shard(0)]).to_local())
        return [(f"result {i}", t) for i, t in enumerate(out)]

    same(run(dist.group.WORLD), [t for _, t in run(gloo)], "DTensor and functional collectives",
         atol=1e-5)


def case_pipeline():
    """torch.distributed.pipelining: a GPipe schedule over 4 stages (its activations and
    gradients go by batch_isend_irecv) training one block per rank for 5 steps, against gloo."""
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    rank, p, gloo = init()

    def run(group):
        torch.manual_seed(0)
        layers = [nn.Sequential(nn.Linear(32, 32), nn.GELU()) for _ in range(p)]
        mod = layers[rank]
        stage = PipelineStage(mod, rank, p, torch.device("cpu"), group=group)
        sched = ScheduleGPipe(stage, n_microbatches=4, loss_fn=F.mse_loss)
        opt = torch.optim.SGD(mod.parameters(), lr=0.1, momentum=0.9)
        g = torch.Generator().manual_seed(7)
        for _ in range(5):
            x, target = torch.randn(8, 32, generator=g), torch.randn(8, 32, generator=g)
            opt.zero_grad()
            if rank == 0:
                sched.step(x)
            elif rank == p - 1:
                sched.step(target=target)
            else:
                sched.step()
            opt.step()
        return [(n, t.detach().clone()) for n, t in mod.named_parameters()]

    ours = run(dist.group.WORLD)
    same(ours, [t for _, t in run(gloo)], "pipeline stage parameters")


if __name__ == "__main__":
    name = sys.argv[1]
    globals()["case_" + name]()
    dist.barrier()
    dist.destroy_process_group()
    print(f"ok {name}", flush=True)
