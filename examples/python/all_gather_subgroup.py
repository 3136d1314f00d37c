"""Example 3 (torch docs): every rank calls new_group(ranks=[0, 1]); only the members gather
[rank*100, rank*100+1] into zeros(4). Run with 4 ranks; ranks 2 and 3 sit it out.
Rank 0 prints tensor([  0.,   1., 100., 101.]).
    rdmacoll-run -n 4 /usr/bin/python3 all_gather_subgroup.py
"""
import torch
import torch.distributed as dist

import rdmacoll_torch  # noqa: F401  registers backend="rdmacoll"

dist.init_process_group(backend="rdmacoll")
rank = dist.get_rank()
group = dist.new_group(ranks=[0, 1])
if rank in (0, 1):
    tensor_in = torch.tensor([rank * 100, rank * 100 + 1], dtype=torch.int64)
    tensor_out = torch.zeros(4, dtype=torch.float32)
    dist.all_gather_into_tensor(tensor_out, tensor_in, group=group)
    print(tensor_out, flush=True)
else:
    print(f"rank {rank} is not in the group", flush=True)
dist.destroy_process_group()
