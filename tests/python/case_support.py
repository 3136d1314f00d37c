"""What every case uses: the world's set-up, exact values per rank, comparison and the
reductions torch defines."""
import datetime

import torch
import torch.distributed as dist


DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64]
FLOATS = {torch.float16, torch.bfloat16, torch.float32, torch.float64}
TORCH2 = int(torch.__version__.split(".")[0]) >= 2
# torch 2.x raises communication errors as this type; torch 1.13 as RuntimeError
DistBackendError = getattr(dist, "DistBackendError", RuntimeError)


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
