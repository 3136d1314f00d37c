"""Example 1 (torch docs): every rank contributes [rank+1, rank+2] (int64) and gathers into a
flat float32 output of world*2 elements. Rank 0 of 2 prints tensor([1., 2., 2., 3.]).
    rdmacoll-run -n 2 /usr/bin/python3 all_gather_flat.py
"""
import torch
import torch.distributed as dist

import rdmacoll_torch  # noqa: F401  registers backend="rdmacoll"

dist.init_process_group(backend="rdmacoll")
rank = dist.get_rank()
world_size = dist.get_world_size()
tensor_in = torch.tensor([rank + 1, rank + 2], dtype=torch.int64)
tensor_out = torch.zeros(world_size * 2, dtype=torch.float32)
dist.all_gather_into_tensor(tensor_out, tensor_in)
print(tensor_out, flush=True)
dist.destroy_process_group()
