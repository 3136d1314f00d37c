"""rdmacoll as a torch.distributed backend, on torch 2.x (pip) and Debian's torch 1.13.

    import rdmacoll_torch  # registers the backend "rdmacoll"
    torch.distributed.init_process_group(backend="rdmacoll")          # CPU tensors
    torch.distributed.init_process_group(backend="cpu:rdmacoll,cuda:nccl")  # with GPUs
    torch.distributed.new_group(ranks, backend="rdmacoll")            # under any default backend

Collectives: all_gather_into_tensor, all_gather, all_reduce (dense, and sparse as gloo does),
reduce_scatter_tensor, reduce_scatter, broadcast, barrier, and on torch 2.x their coalesced
forms, each as rdmacoll's async work.
"""
import atexit
import inspect

import torch.distributed as _dist

from . import _C

__all__ = ["transport_name", "torch_version_built"]


def _create(opts, pg_options=None):
    """torch's extended creator. The default group (no global ranks listed) makes rdmacoll's
    world; a later group is a member group of that world, or, when the default group is another
    backend's, a standalone group of its members."""
    if len(opts.global_ranks_in_group) == 0:
        kind = _C.Kind.WORLD
    elif _C.is_initialized():
        kind = _C.Kind.MEMBER
    else:
        kind = _C.Kind.STANDALONE
    return _C.RdmacollBackend(opts.store, opts.group_rank, opts.group_size, opts.timeout, kind)


def transport_name():
    """The transport rdmacoll chose for this process ("ucx" or "verbs")."""
    return _C.transport_name()


def torch_version_built():
    """The torch version this backend was compiled against."""
    return _C.torch_version_built()


if not hasattr(_dist.Backend, "RDMACOLL"):  # torch keeps registered names upper-cased
    _kwargs = {}
    if "devices" in inspect.signature(_dist.Backend.register_backend).parameters:
        _kwargs["devices"] = ["cpu"]  # "cpu:rdmacoll,cuda:nccl" gives GPUs to NCCL
    _dist.Backend.register_backend("rdmacoll", _create, extended_api=True, **_kwargs)

# A script that ends without destroy_process_group (an exception, Ctrl-C, sys.exit) leaves at
# once: its peers raise now instead of waiting for it until their timeout.
atexit.register(_C.leave_at_exit)
