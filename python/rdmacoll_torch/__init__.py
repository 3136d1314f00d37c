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

__all__ = ["empty", "transport_name", "torch_version_built"]


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


def empty(*size, dtype=None, group=None):
    """A zeroed CPU tensor in symmetric memory: every member of `group` (default: the world)
    allocates it together, and every member on one host maps every member's. A
    dist.all_gather_into_tensor whose output is such a tensor on every member stores each chunk
    straight into every member's output (one copy, no registration). Collective: every member
    calls it with the same size and dtype, in the same order as its other calls on the group.
    Where the members cannot map each other's memory it is an ordinary tensor."""
    import torch

    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    dtype = dtype or torch.get_default_dtype()
    pg = group if group is not None else _dist.distributed_c10d._get_default_group()
    if pg == _dist.GroupMember.NON_GROUP_MEMBER:
        return torch.zeros(size, dtype=dtype)
    backend = pg
    if not isinstance(backend, _C.RdmacollBackend) and hasattr(pg, "_get_backend"):
        backend = pg._get_backend(torch.device("cpu"))
    if not isinstance(backend, _C.RdmacollBackend):
        raise ValueError("rdmacoll_torch.empty needs a group whose CPU backend is rdmacoll")
    return backend._empty([int(s) for s in size], dtype)


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



def _after_c10d(name, mend):
    """Runs `mend(pg, *args)` on the group that torch.distributed.distributed_c10d's `name`
    returns, where this torch has it (once per process)."""
    c10d = _dist.distributed_c10d
    original = getattr(c10d, name, None)
    if original is None or getattr(original, "_rdmacoll", False):
        return

    def wrapped(*args, **kwargs):
        pg = original(*args, **kwargs)
        mend(pg, *args)
        return pg

    wrapped._rdmacoll = True
    setattr(c10d, name, wrapped)


def _register_as_custom(pg, new_backend, *_):
    """torch.distributed.shrink_group registers the shrunk backend under the device's built-in
    type (ProcessGroup.BackendType.GLOO for CPU), whatever the backend is; DDP's logger then takes
    rdmacoll's backend for a ProcessGroupGloo and crashes in set_env_variables (torch 2.15). A
    shrunk rdmacoll group is registered as a third-party backend is everywhere else (CUSTOM)."""
    if isinstance(new_backend, _C.RdmacollBackend):
        import torch

        custom = _dist.ProcessGroup.BackendType.CUSTOM
        pg._register_backend(torch.device("cpu"), custom, new_backend)
        pg._set_default_backend(custom)


def _renumber_the_default(pg, group_info, _excluded, new_backend, *_):
    """After shrink_group on the default group, torch 2.15's dist.get_rank() is the rank in the
    shrunk group (survivors renumbered 0..n-1), but it maps the group's ranks from the old
    numbering ({0: 0, 1: 1, 3: 2} after rank 2 left): get_process_group_ranks(WORLD) gives
    [0, 1, 3], and a DeviceMesh over the new world finds no coordinate for the survivor now
    numbered 2 (FSDP2 then gives it empty shards). The shrunk default group is mapped as
    init_process_group maps a default group, one to one, so both numberings agree."""
    if isinstance(new_backend, _C.RdmacollBackend) and group_info.get("is_default_group"):
        _dist.distributed_c10d._world.pg_group_ranks[pg] = {r: r for r in range(pg.size())}


_after_c10d("_create_shrunk_process_group", _register_as_custom)
_after_c10d("_finalize_shrunk_group", _renumber_the_default)

# A script that ends without destroy_process_group (an exception, Ctrl-C, sys.exit) leaves at
# once: its peers raise now instead of waiting for it until their timeout.
atexit.register(_C.leave_at_exit)
