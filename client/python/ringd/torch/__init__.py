"""PyTorch helpers for data-parallel training over ringd (CPU tensors).

    import ringd.torch as rt

    rt.broadcast_parameters(model, root=0)            # every replica starts equal
    opt = rt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  named_parameters=model.named_parameters())
    for x, y in shard:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()                                    # gradients averaged first

Every function takes conn= (a ringd.Connection); without it they use the
process's shared connection, ringd.default_connection(), made on first use
from $RINGD_SOCKET.

Element types: float32, float64, float16, bfloat16, and int8, uint8, int32,
int64. Non-contiguous tensors go through a contiguous copy.
"""

import contextlib

import numpy as np
import torch

from . import _core, _lib
from ._core import Connection

_CODES = {
    torch.int8: 0,
    torch.uint8: 1,
    torch.int32: 2,
    torch.int64: 3,
    torch.float16: 4,
    torch.bfloat16: 5,
    torch.float32: 6,
    torch.float64: 7,
}

FUSION_BYTES = 64 << 20  # default bucket size of DistributedOptimizer
_ALIGN = 64  # byte alignment of each tensor in a fusion buffer


def _conn(conn):
    return conn if conn is not None else _core.default_connection()


def dtype_code(dtype):
    """The ringd dtype of a torch dtype; TypeError if ringd has none."""
    try:
        return _CODES[dtype]
    except KeyError:
        raise TypeError(
            f"ringd has no element type for {dtype} (it reduces int8, uint8, int32, int64, "
            "float16, bfloat16, float32 and float64)"
        ) from None


def _check(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ValueError(f"{what}: ringd reduces CPU tensors; this one is on {tensor.device}")
    if tensor.layout != torch.strided:
        raise ValueError(f"{what}: ringd reduces dense tensors, not {tensor.layout}")
    return dtype_code(tensor.dtype)


def empty(shape, dtype=torch.float32, conn=None):
    """A zero-filled CPU tensor in memory shared with the daemon: collectives
    on it copy nothing. Usable after the connection closes (then private)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    itemsize = torch.empty((), dtype=dtype).element_size()
    n = 1
    for d in shape:
        n *= int(d)
    if n == 0:
        return torch.empty(shape, dtype=dtype)
    raw = torch.from_numpy(_conn(conn).empty(n * itemsize, np.uint8))
    return raw.view(dtype).view(shape)


def _inplace(tensor, what):
    """(work, done): work is a contiguous tensor to hand to ringd; done()
    copies its result back when it is a copy, and returns tensor."""
    if tensor.is_contiguous():
        return tensor, lambda: tensor
    with torch.no_grad():
        work = tensor.contiguous()

    def done():
        with torch.no_grad():
            tensor.copy_(work)
        return tensor

    return work, done


def allreduce_async_(tensor, op="mean", *, weight=None, conn=None, name=None):
    """allreduce_() without waiting: a ringd Request whose wait() returns the
    tensor. Do not touch the tensor until then."""
    code = _check(tensor, "allreduce_")
    work, done = _inplace(tensor, "allreduce_")
    return _conn(conn)._allreduce_ptr(
        work.data_ptr(), work.numel(), code, op, weight, keep=(tensor, work), on_done=done,
        name=name, what="allreduce_",
    )


def allreduce_(tensor, op="mean", *, weight=None, conn=None, name=None):
    """Reduces a CPU tensor across all ranks in place and returns it. op:
    "mean" (default), "sum", "min", "max", "prod", or "wmean" with weight=
    this rank's weight. Works on tensors that require grad (the data is
    replaced, autograd does not see it)."""
    return allreduce_async_(tensor, op, weight=weight, conn=conn, name=name).wait()


def broadcast_(tensor, root=0, *, conn=None, name=None):
    """Overwrites tensor with the root rank's, in place; returns it."""
    code = _check(tensor, "broadcast_")
    work, done = _inplace(tensor, "broadcast_")
    return _conn(conn)._broadcast_ptr(
        work.data_ptr(), work.numel(), code, root, keep=(tensor, work), on_done=done,
        name=name, what="broadcast_",
    ).wait()


def allgather(tensor, *, conn=None, name=None):
    """Every rank's tensor stacked along a new first axis, in rank order."""
    c = _conn(conn)
    _check(tensor, "allgather")
    src = tensor.detach().contiguous()
    out = torch.empty((c.size,) + tuple(src.shape), dtype=src.dtype)
    src_np = src.view(torch.int16).numpy() if src.dtype == torch.bfloat16 else src.numpy()
    out_np = out.view(torch.int16).numpy() if out.dtype == torch.bfloat16 else out.numpy()
    c.allgather(src_np, out=out_np, dtype="bfloat16" if src.dtype == torch.bfloat16 else None,
                name=name)
    return out


def _named_tensors(obj):
    """(name, tensor) pairs of a module (its state_dict: parameters and
    buffers), a dict, or an iterable of pairs or of tensors."""
    if isinstance(obj, torch.nn.Module):
        return list(obj.state_dict().items())
    if isinstance(obj, dict):
        return list(obj.items())
    out = []
    for i, item in enumerate(obj):
        if isinstance(item, torch.Tensor):
            out.append((str(i), item))
        else:
            name, t = item
            out.append((name, t))
    return out


def _fusion_buffer(cache, conn, key, nbytes):
    """A uint8 tensor of at least nbytes in shared memory, reused per key."""
    buf = cache.get(key)
    if buf is None or buf.numel() < nbytes:
        buf = torch.from_numpy(conn.empty(nbytes, np.uint8))
        cache[key] = buf
    return buf


def _round_up(n, a=_ALIGN):
    return (n + a - 1) // a * a


def broadcast_parameters(params, root=0, *, conn=None, fusion_bytes=FUSION_BYTES):
    """Sets every rank's parameters to the root rank's, in place.

    params: a torch.nn.Module (its state_dict, so buffers such as BatchNorm
    statistics too), a state dict, or an iterable of (name, tensor) pairs
    or of tensors, in the same order on every rank. Tensors of any dtype are
    packed byte for byte into shared buffers of up to fusion_bytes, one
    broadcast per buffer."""
    c = _conn(conn)
    items = _named_tensors(params)
    for name, t in items:
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or t.layout != torch.strided:
            raise TypeError(f"broadcast_parameters: {name} is not a dense CPU tensor")
    cache = {}
    group, group_bytes = [], 0

    def flush():
        nonlocal group, group_bytes
        if not group:
            return
        buf = _fusion_buffer(cache, c, "bcast", group_bytes)
        off = 0
        slots = []
        with torch.no_grad():
            for name, t in group:
                nb = t.numel() * t.element_size()
                view = buf[off : off + nb].view(t.dtype).view(t.shape)
                if c.rank == root:
                    view.copy_(t)
                slots.append((t, view))
                off = _round_up(off + nb)
            first, last = group[0][0], group[-1][0]
            label = f"broadcast_parameters {first}..{last}"
            c._broadcast_ptr(
                buf.data_ptr(), group_bytes, _lib.DTYPES["uint8"], root, keep=buf,
                name=label.encode()[: _lib.NAME_MAX].decode("utf-8", "ignore"),
                what="broadcast_parameters",
            ).wait()
            if c.rank != root:
                for t, view in slots:
                    t.copy_(view)
        group, group_bytes = [], 0

    for name, t in items:
        nb = t.numel() * t.element_size()
        if nb == 0:
            continue
        if group and _round_up(group_bytes) + nb > fusion_bytes:
            flush()
        group_bytes = _round_up(group_bytes) + nb
        group.append((name, t))
    flush()


class _Bucket:
    """Gradients of one dtype packed into one shared buffer."""

    __slots__ = ("dtype", "params", "offsets", "nbytes", "label")

    def __init__(self, dtype):
        self.dtype = dtype
        self.params = []
        self.offsets = []
        self.nbytes = 0
        self.label = ""


class _DistributedOptimizerMixin:
    """Methods added to the class of the wrapped optimizer."""

    def _ringd_setup(self, named_parameters, op, fusion_bytes, conn, weight):
        self._ringd_conn = conn
        self._ringd_op = _core.parse_op(op)
        self._ringd_fusion = int(fusion_bytes)
        self._ringd_cache = {}
        self._ringd_layout = None
        self._ringd_synced = False
        self.ringd_weight = weight
        ids = {id(p) for g in self.param_groups for p in g["params"]}
        names = {}
        if named_parameters is not None:
            for name, p in named_parameters:
                if name in names.values():
                    raise ValueError(f"DistributedOptimizer: parameter name {name!r} appears twice")
                names[id(p)] = name
            unnamed = [i for i in ids if i not in names]
            if unnamed:
                raise ValueError(
                    f"DistributedOptimizer: {len(unnamed)} parameter(s) of the optimizer are "
                    "missing from named_parameters"
                )
        self._ringd_names = names
        if self._ringd_op == _lib.WMEAN and weight is None:
            raise ValueError("DistributedOptimizer: op 'wmean' needs weight= (or set ringd_weight)")

    def _ringd_buckets(self, params):
        """The bucket layout for params, recomputed only when it changes."""
        key = tuple((id(p), p.dtype, p.numel()) for p in params)
        if self._ringd_layout is not None and self._ringd_layout[0] == key:
            return self._ringd_layout[1]
        buckets, open_ = [], {}
        for p in params:
            code = dtype_code(p.dtype)
            nb = p.numel() * p.element_size()
            b = open_.get(code)
            if b is None or (b.params and _round_up(b.nbytes) + nb > self._ringd_fusion):
                b = open_[code] = _Bucket(p.dtype)
                buckets.append(b)
            off = _round_up(b.nbytes)
            b.params.append(p)
            b.offsets.append(off)
            b.nbytes = off + nb
        for i, b in enumerate(buckets):
            first = self._ringd_names.get(id(b.params[0]), "?")
            last = self._ringd_names.get(id(b.params[-1]), "?")
            label = f"grads#{i} {first}..{last}"
            b.label = label.encode()[: _lib.NAME_MAX].decode("utf-8", "ignore")
        self._ringd_layout = (key, buckets)
        return buckets

    def synchronize(self):
        """Averages (op) the gradients over all ranks now. A parameter without
        a gradient contributes zeros and gets the result as its gradient, so
        that every replica takes the same step."""
        c = _conn(self._ringd_conn)
        params = [
            p for g in self.param_groups for p in g["params"] if p.requires_grad and p.numel()
        ]
        buckets = self._ringd_buckets(params)
        reqs = []
        weight = self.ringd_weight if self._ringd_op == _lib.WMEAN else None
        with torch.no_grad():
            # Pack and submit bucket by bucket: packing the next one overlaps
            # the reduction of the previous ones on the ring.
            for i, b in enumerate(buckets):
                buf = _fusion_buffer(self._ringd_cache, c, i, b.nbytes)
                for p, off in zip(b.params, b.offsets):
                    dst = buf[off : off + p.numel() * p.element_size()].view(b.dtype)
                    if p.grad is None:
                        dst.zero_()
                    elif p.grad.layout != torch.strided:
                        raise TypeError("DistributedOptimizer: sparse gradients are not supported")
                    else:
                        dst.copy_(p.grad.reshape(-1))
                count = b.nbytes // torch.empty((), dtype=b.dtype).element_size()
                reqs.append(
                    c._allreduce_ptr(
                        buf.data_ptr(), count, dtype_code(b.dtype), self._ringd_op, weight,
                        keep=buf, name=b.label, what="DistributedOptimizer",
                    )
                )
            for i, (b, req) in enumerate(zip(buckets, reqs)):
                req.wait()
                buf = self._ringd_cache[i]
                for p, off in zip(b.params, b.offsets):
                    src = buf[off : off + p.numel() * p.element_size()].view(b.dtype).view_as(p)
                    if p.grad is None:
                        p.grad = src.clone()
                    else:
                        p.grad.copy_(src)
        self._ringd_synced = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside this block does not average (after an explicit
        synchronize(), e.g. to clip the averaged gradients)."""
        self._ringd_synced = True
        try:
            yield
        finally:
            pass

    def step(self, closure=None):
        if not self._ringd_synced:
            self.synchronize()
        self._ringd_synced = False
        return super(self.__class__, self).step(closure)


def DistributedOptimizer(
    optimizer, named_parameters=None, op="mean", *, fusion_bytes=FUSION_BYTES, conn=None,
    weight=None,
):
    """Wraps optimizer so that step() first averages the gradients of all
    ranks (op "mean"; "sum"; or "wmean" with weight=, or the attribute
    ringd_weight set before each step, say to the batch size).

    The result is an instance of a subclass of the optimizer's class sharing
    the optimizer's state, so LR schedulers and state_dict() work on it.
    Gradients are fused: packed by dtype into shared buffers of up to
    fusion_bytes, one allreduce per buffer, the buffers pipelined.
    named_parameters (e.g. model.named_parameters()) names the parameters in
    error messages and is checked to cover the optimizer's parameters.
    Gradients computed inside a step(closure) are not averaged."""
    base = optimizer.__class__
    methods = {
        k: v
        for k, v in _DistributedOptimizerMixin.__dict__.items()
        if k not in ("__dict__", "__weakref__")
    }
    cls = type(base.__name__, (base,), methods)
    opt = cls.__new__(cls)
    opt.__dict__.update(optimizer.__dict__)
    opt._ringd_setup(
        list(named_parameters) if named_parameters is not None else None, op, fusion_bytes,
        conn, weight,
    )
    return opt


def allreduce_hook(state, bucket):
    """A communication hook for DistributedDataParallel: averages the
    bucket's gradients over the ringd ring instead of the process group.

        model = DistributedDataParallel(net, process_group=pg)
        model.register_comm_hook(conn, ringd.torch.allreduce_hook)

    state: a ringd.Connection, or None for ringd.default_connection(). The
    reduction runs during the hook (synchronously); the returned future is
    already complete."""
    c = state if isinstance(state, Connection) else _conn(None)
    t = bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()
    allreduce_(t, op="mean", conn=c, name=f"ddp bucket {bucket.index()}")
    fut = torch.futures.Future()
    fut.set_result(t)
    return fut
