"""Tensors as libringd sees them: element types, addresses, in-place staging,
shared memory, and the agreement check in tensor terms."""

import torch

from .. import _agree, _core, _lib


def conn_of(conn):
    """conn, or the process's connection (made on first use)."""
    return conn if conn is not None else _core.connect()


def dtype_name(dtype):
    """'float32' for torch.float32."""
    return str(dtype).replace("torch.", "")


def dtype_code(dtype):
    """The ringd dtype of a torch dtype (the names are the same as ringd's);
    TypeError if ringd has none."""
    dtypes = _lib.DTYPES
    code = dtypes.get(dtype_name(dtype))
    if code is None:
        raise TypeError(f"ringd has no element type for {dtype} (it reduces {', '.join(dtypes)})")
    return code


def check(tensor, what):
    """Raises unless tensor is a dense CPU tensor."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ValueError(f"{what}: ringd works on CPU tensors; this one is on {tensor.device}")
    if tensor.layout != torch.strided:
        raise ValueError(f"{what}: ringd works on dense tensors, not {tensor.layout}")


def checked_code(tensor, what):
    """check(), then the tensor's ringd dtype."""
    check(tensor, what)
    return dtype_code(tensor.dtype)


def as_bytes(tensor):
    """A contiguous tensor's memory as a flat uint8 tensor (a view)."""
    return tensor.reshape(-1).view(torch.uint8)


def inplace(tensor):
    """(work, done): work is a contiguous tensor to hand to ringd, tensor
    itself when it is contiguous; done() copies work's result back into
    tensor when it is a copy, and returns tensor."""
    if tensor.is_contiguous():
        return tensor, lambda: tensor
    with torch.no_grad():
        work = tensor.contiguous()

    def done():
        with torch.no_grad():
            tensor.copy_(work)
        return tensor

    return work, done


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
    import numpy as np

    raw = torch.from_numpy(conn_of(conn).empty(n * itemsize, np.uint8))
    return raw.view(dtype).view(shape)


def signature(name, tensor):
    return (name, tuple(tensor.shape), dtype_name(tensor.dtype))


def agree(conn, what, named):
    """ringd._agree.check_same() on (name, tensor) pairs."""
    _agree.check_same(conn, what, [signature(n, t) for n, t in named])


def label(text):
    """text cut to a collective name's limit (64 bytes of UTF-8)."""
    return text.encode()[: _lib.NAME_MAX].decode("utf-8", "ignore")
