"""rdmacoll as a torch.distributed backend.

    import rdmacoll_torch  # registers the backend "rdmacoll"
    torch.distributed.init_process_group(backend="rdmacoll")

Collectives: all_gather_into_tensor, all_gather, all_reduce, reduce_scatter_tensor,
reduce_scatter, broadcast, barrier, on CPU tensors, each as rdmacoll's async work.
"""
import atexit

import torch.distributed as _dist

from . import _C

__all__ = ["transport_name"]


def _create(opts, pg_options=None):
    """torch 1.13's extended creator: the default group has no global ranks listed."""
    return _C.ProcessGroupRdmacoll(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                                   len(opts.global_ranks_in_group) == 0)


def transport_name():
    """The transport rdmacoll chose for this process ("ucx" or "verbs")."""
    return _C.transport_name()


if not hasattr(_dist.Backend, "RDMACOLL"):  # torch keeps registered names upper-cased
    _dist.Backend.register_backend("rdmacoll", _create, extended_api=True)

atexit.register(_C.shutdown)
