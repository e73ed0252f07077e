"""Collectives on tensors, and the broadcasts that start a data-parallel run
equal on every rank: parameters, optimizer state, any picklable object."""

import pickle

import numpy as np
import torch

from .. import _lib
from . import _tensors
from ._tensors import agree, conn_of, label

FUSION_BYTES = 64 << 20  # default size of the buffers broadcast_parameters packs into
_ALIGN = 64  # byte alignment of each tensor in a packed buffer


def _round_up(n, a=_ALIGN):
    return (n + a - 1) // a * a


def _root(root_rank, root):
    """root_rank (Horovod's name), or root (this package's former name)."""
    return int(root_rank if root is None else root)


# ---- one tensor -----------------------------------------------------------------


def allreduce_async_(tensor, op="mean", *, weight=None, conn=None, name=None):
    """allreduce_() without waiting: a ringd.Request whose wait() returns the
    tensor (synchronize(handle) does the same). Do not touch the tensor
    until then. The first call for a new shape checks it on every rank
    first, which waits."""
    c = conn_of(conn)
    code = _tensors.checked_code(tensor, "allreduce")
    agree(c, "allreduce", [(name or "tensor", tensor)])
    work, done = _tensors.inplace(tensor)
    return c._submit_ptr(
        _lib.COLL_ALLREDUCE, "allreduce", buf=work.data_ptr(), count=work.numel(), code=code,
        op=op, weight=weight, keep=(tensor, work), on_done=done, name=name,
    )


def allreduce_(tensor, op="mean", *, weight=None, conn=None, name=None):
    """Reduces a CPU tensor across all ranks in place and returns it. op:
    "mean" (default), "sum", "min", "max", "prod", or "wmean" with weight=
    this rank's weight. Works on tensors that require grad (the data is
    replaced, autograd does not see it). A shape that differs between ranks
    raises RingError(EMISMATCH) on every rank, naming it (name= names the
    tensor there and in the daemon's messages)."""
    return allreduce_async_(tensor, op, weight=weight, conn=conn, name=name).wait()


def allreduce_async(tensor, op="mean", *, weight=None, conn=None, name=None):
    """allreduce() without waiting: its wait() returns the new tensor."""
    with torch.no_grad():
        out = tensor.detach().clone()
    return allreduce_async_(out, op, weight=weight, conn=conn, name=name)


def allreduce(tensor, op="mean", *, weight=None, conn=None, name=None):
    """The reduction of tensor across all ranks, as a new tensor."""
    return allreduce_async(tensor, op, weight=weight, conn=conn, name=name).wait()


def broadcast_async_(tensor, root_rank=0, *, conn=None, name=None, root=None):
    """broadcast_() without waiting: a ringd.Request whose wait() returns the
    tensor."""
    c = conn_of(conn)
    _tensors.check(tensor, "broadcast")
    agree(c, "broadcast", [(name or "tensor", tensor)])
    work, done = _tensors.inplace(tensor)
    # Bytes: a broadcast computes nothing, so any dtype goes (bool too).
    return c._submit_ptr(
        _lib.COLL_BROADCAST, "broadcast", buf=work.data_ptr(),
        count=work.numel() * work.element_size(), code=_lib.DTYPES["uint8"],
        root=_root(root_rank, root), keep=(tensor, work), on_done=done, name=name,
    )


def broadcast_(tensor, root_rank=0, *, conn=None, name=None, root=None):
    """Overwrites tensor with the root rank's, in place; returns it."""
    return broadcast_async_(tensor, root_rank, conn=conn, name=name, root=root).wait()


def broadcast(tensor, root_rank=0, *, conn=None, name=None, root=None):
    """The root rank's tensor, as a new tensor (tensor is left as it is)."""
    with torch.no_grad():
        out = tensor.detach().clone()
    return broadcast_(out, root_rank, conn=conn, name=name, root=root)


def allgather(tensor, *, conn=None, name=None):
    """Every rank's tensor stacked along a new first axis, in rank order:
    shape (size,) + tensor.shape. (Horovod's allgather concatenates along
    the first axis instead: allgather(t).flatten(0, 1) is that.)"""
    c = conn_of(conn)
    _tensors.check(tensor, "allgather")
    agree(c, "allgather", [(name or "tensor", tensor)])
    src = tensor.detach().contiguous()
    out = torch.empty((c.size,) + tuple(src.shape), dtype=src.dtype)
    nbytes = src.numel() * src.element_size()
    c._submit_ptr(
        _lib.COLL_ALLGATHER, "allgather", buf=out.data_ptr(), input=src.data_ptr(),
        count=nbytes, code=_lib.DTYPES["uint8"], keep=(src, out), name=name,
    ).wait()
    return out


def synchronize(handle):
    """Waits for an *_async handle; returns its tensor (Horovod's name)."""
    return handle.wait()


def poll(handle):
    """True if an *_async handle has completed (Horovod's name)."""
    return handle.test()


# ---- objects ----------------------------------------------------------------------


def _bytes_tensor(c, nbytes):
    return torch.from_numpy(c.empty(max(nbytes, 1), np.uint8))[:nbytes]


def broadcast_object(obj, root_rank=0, *, conn=None, name=None):
    """The root rank's obj on every rank (pickled there, unpickled here);
    the root gets its own obj back."""
    c = conn_of(conn)
    root = int(root_rank)
    what = label(f"broadcast_object {name or ''}".rstrip())
    data = pickle.dumps(obj, pickle.HIGHEST_PROTOCOL) if c.rank == root else b""
    size = c.broadcast(np.array([len(data)], np.int64), root, name=what)
    buf = _bytes_tensor(c, int(size[0]))
    if c.rank == root:
        buf.numpy()[:] = np.frombuffer(data, np.uint8)
    c._submit_ptr(
        _lib.COLL_BROADCAST, "broadcast_object", buf=buf.data_ptr(), count=buf.numel(),
        code=_lib.DTYPES["uint8"], root=root, keep=buf, name=what,
    ).wait()
    return obj if c.rank == root else pickle.loads(buf.numpy().tobytes())


def allgather_object(obj, *, conn=None, name=None):
    """Every rank's obj, in a list in rank order (pickled, gathered,
    unpickled)."""
    c = conn_of(conn)
    what = label(f"allgather_object {name or ''}".rstrip())
    data = pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
    sizes = c.allgather(np.array([len(data)], np.int64), name=what)[:, 0]
    mine = np.zeros(int(sizes.max()), np.uint8)
    mine[: len(data)] = np.frombuffer(data, np.uint8)
    rows = c.allgather(mine, name=what)
    return [pickle.loads(rows[r, : sizes[r]].tobytes()) for r in range(c.size)]


# ---- parameters and optimizer state ------------------------------------------


def _named_tensors(obj, what):
    """(name, tensor) pairs of a module (its state_dict: parameters and
    buffers), a dict, or an iterable of pairs or of tensors."""
    if isinstance(obj, torch.nn.Module):
        return list(obj.state_dict().items())
    if isinstance(obj, torch.optim.Optimizer) or (
        isinstance(obj, dict) and set(obj) == {"state", "param_groups"}
    ):
        raise TypeError(
            f"{what}: this is an optimizer or its state_dict(); use "
            "broadcast_optimizer_state(optimizer, root_rank) for it"
        )
    if isinstance(obj, dict):
        items = list(obj.items())
    else:
        items = [(str(i), t) if isinstance(t, torch.Tensor) else tuple(t) for i, t in enumerate(obj)]
    for n, t in items:
        if not isinstance(t, torch.Tensor):
            raise TypeError(
                f"{what}: {n!r} is a {type(t).__name__}, not a tensor; pass tensors (a "
                "module, its state_dict(), (name, tensor) pairs), and other values to "
                "broadcast_object()"
            )
        _tensors.check(t, f"{what}: {n}")
    return items


def _broadcast_packed(c, named, root, fusion_bytes, what):
    """Sets every rank's tensors of named to the root's: packed byte for byte
    into a shared buffer of up to fusion_bytes, one broadcast per buffer."""
    groups, group, nbytes = [], [], 0
    for n, t in named:
        nb = t.numel() * t.element_size()
        if nb == 0:
            continue
        if group and _round_up(nbytes) + nb > fusion_bytes:
            groups.append((group, nbytes))
            group, nbytes = [], 0
        nbytes = _round_up(nbytes) + nb
        group.append((n, t))
    if group:
        groups.append((group, nbytes))
    if not groups:
        return
    buf = _bytes_tensor(c, max(nb for _, nb in groups))
    with torch.no_grad():
        for group, nbytes in groups:
            views, off = [], 0
            for n, t in group:
                nb = t.numel() * t.element_size()
                view = buf[off : off + nb].view(t.dtype).view(t.shape)
                if c.rank == root:
                    view.copy_(t)
                views.append((t, view))
                off = _round_up(off + nb)
            c._submit_ptr(
                _lib.COLL_BROADCAST, what, buf=buf.data_ptr(), count=nbytes,
                code=_lib.DTYPES["uint8"], root=root, keep=buf,
                name=label(f"{what} {group[0][0]}..{group[-1][0]}"),
            ).wait()
            if c.rank != root:
                for t, view in views:
                    t.copy_(view)


def broadcast_parameters(params, root_rank=0, *, conn=None, fusion_bytes=FUSION_BYTES,
                         root=None):
    """Sets every rank's parameters to the root rank's, in place.

    params: a torch.nn.Module (its state_dict, so buffers such as BatchNorm
    statistics too), a state dict, or an iterable of (name, tensor) pairs or
    of tensors, in the same order on every rank. Names, shapes and dtypes
    are checked to agree first (RingError EMISMATCH on every rank, naming
    the first difference). Tensors of any dtype are packed byte for byte
    into shared buffers of up to fusion_bytes, one broadcast per buffer.
    root= is an older name of root_rank."""
    c = conn_of(conn)
    named = _named_tensors(params, "broadcast_parameters")
    agree(c, "broadcast_parameters", named)
    _broadcast_packed(c, named, _root(root_rank, root), fusion_bytes, "broadcast_parameters")


class _TensorSpec:
    """Where a tensor stood in the root's optimizer state, and what it was."""

    def __init__(self, index, shape, dtype):
        self.index, self.shape, self.dtype = index, shape, dtype


def _map_leaves(obj, kind, fn):
    """obj with every leaf of type kind in its dicts, lists and tuples
    replaced by fn(leaf)."""
    if isinstance(obj, kind):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: _map_leaves(v, kind, fn) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_leaves(v, kind, fn) for v in obj)
    return obj


def broadcast_optimizer_state(optimizer, root_rank=0, *, conn=None, fusion_bytes=FUSION_BYTES):
    """Sets every rank's optimizer state (its state_dict(): hyperparameters,
    momentum buffers, step counts, ...) to the root rank's. The optimizers
    must hold parameters of the same shapes in the same order (checked:
    RingError EMISMATCH on every rank otherwise); the others' state may be
    empty, as before the first step. The root sends the structure of its
    state with broadcast_object() and the tensors packed as
    broadcast_parameters() does; the others load it with load_state_dict()."""
    c = conn_of(conn)
    root = int(root_rank)
    names = getattr(optimizer, "_ringd_names", {})
    params = [
        (names.get(id(p), f"param_groups[{g}][{j}]"), p)
        for g, group in enumerate(optimizer.param_groups)
        for j, p in enumerate(group["params"])
    ]
    agree(c, "broadcast_optimizer_state", params)
    tensors = []

    def spec(t):
        tensors.append(t)
        return _TensorSpec(len(tensors) - 1, tuple(t.shape), _tensors.dtype_name(t.dtype))

    # The root's state with its tensors replaced by specs, on every rank.
    mine = _map_leaves(optimizer.state_dict(), torch.Tensor, spec) if c.rank == root else None
    shape = broadcast_object(mine, root, conn=c, name="optimizer state")
    if c.rank != root:
        specs = []
        _map_leaves(shape, _TensorSpec, specs.append)
        specs.sort(key=lambda s: s.index)
        tensors = [torch.empty(s.shape, dtype=getattr(torch, s.dtype)) for s in specs]
    _broadcast_packed(c, [(f"state[{i}]", t) for i, t in enumerate(tensors)], root,
                      fusion_bytes, "broadcast_optimizer_state")
    if c.rank != root:
        optimizer.load_state_dict(_map_leaves(shape, _TensorSpec, lambda s: tensors[s.index]))


# ---- DistributedDataParallel with another process group --------------------------


def allreduce_hook(state, bucket):
    """A communication hook for DistributedDataParallel over another process
    group (gloo, say): averages the bucket's gradients over the ringd ring
    instead. With the "ringd" backend (dist.init_process_group("ringd")) no
    hook is needed.

        model = DistributedDataParallel(net, process_group=pg)
        model.register_comm_hook(conn, ringd.torch.allreduce_hook)

    state: a ringd.Connection, or None for the process's connection. The
    reduction runs during the hook (synchronously); the returned future is
    already complete."""
    c = conn_of(state)
    t = bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()
    allreduce_(t, op="mean", conn=c, name=f"ddp bucket {bucket.index()}")
    fut = torch.futures.Future()
    fut.set_result(t)
    return fut

