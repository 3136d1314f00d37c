"""Example 2 (torch docs): input [rank*10+1, rank*10+2, rank*10+3] (int64) gathered into a
stacked (world, 3) float32 output. Rank 0 of 2 prints rows [1., 2., 3.] and [11., 12., 13.].
    rdmacoll-run -n 2 /usr/bin/python3 all_gather_stacked.py
"""
import torch
import torch.distributed as dist

import rdmacoll_torch  # noqa: F401  registers backend="rdmacoll"

dist.init_process_group(backend="rdmacoll")
rank = dist.get_rank()
world_size = dist.get_world_size()
tensor_in = torch.tensor([rank * 10 + 1, rank * 10 + 2, rank * 10 + 3], dtype=torch.int64)
tensor_out = torch.zeros(world_size, 3, dtype=torch.float32)
dist.all_gather_into_tensor(tensor_out, tensor_in)
print(tensor_out, flush=True)
dist.destroy_process_group()
