"""Cases: DDP training and a GPipe-style pipeline."""
import torch
import torch.distributed as dist

from case_support import init


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
