"""ringd: allreduce across the hosts of a ring, from Python.

ctypes over libringd, nothing to compile; NumPy arrays in, NumPy arrays out.

    import numpy as np
    import ringd

    with ringd.connect() as c:                 # $RINGD_SOCKET or /run/ringd/ringd.sock
        grad = c.empty(1000, np.float32)       # shared with the daemon: zero copy
        grad[:] = ...
        c.allreduce(grad, op="mean")           # in place, on every rank
        print(c.rank, c.size, grad[:4])

Collectives: allreduce (ops sum, mean, min, max, prod, and wmean with
weight=), broadcast, allgather, reduce_scatter, barrier, each also as
*_async returning a Request. Element types: int8, uint8, int32, int64,
float16, float32, float64, and bfloat16 as uint16 bit patterns with
dtype="bfloat16" (ringd.torch takes torch.bfloat16 tensors directly).
Failures raise ringd.RingError(code, name, message).

libringd is found by itself ($RINGD_LIBRARY overrides; see ringd._lib).
PyTorch helpers are in ringd.torch.
"""

from ._core import (
    Connection,
    Request,
    connect,
    default_connection,
    dtype_code,
    init,
    numpy_dtype,
    parse_op,
)
from ._lib import (
    EABORTED,
    EAUTH,
    EBUSY,
    ECLOSED,
    ECONNECT,
    ECORRUPT,
    EINPROGRESS,
    EPERM,
    EINVAL,
    EIO,
    EMISMATCH,
    ENOMEM,
    EPROTO,
    ERANGE,
    ERING,
    ESHM,
    ESHUTDOWN,
    ETIMEDOUT,
    ETOOBIG,
    EVERSION,
    RingError,
    WaitTimeout,
)

__version__ = "0.1.0"

DTYPES = ("int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64")
OPS = ("sum", "mean", "min", "max", "prod", "wmean")


def library_path():
    """Where the libringd in use was loaded from (loading it if needed)."""
    from . import _lib

    return _lib.load().path


__all__ = [
    "EABORTED",
    "EAUTH",
    "EBUSY",
    "ECLOSED",
    "ECONNECT",
    "ECORRUPT",
    "EINPROGRESS",
    "EPERM",
    "EINVAL",
    "EIO",
    "EMISMATCH",
    "ENOMEM",
    "EPROTO",
    "ERANGE",
    "ERING",
    "ESHM",
    "ESHUTDOWN",
    "ETIMEDOUT",
    "ETOOBIG",
    "EVERSION",
    "Connection",
    "Request",
    "RingError",
    "WaitTimeout",
    "connect",
    "default_connection",
    "init",
    "library_path",
    "dtype_code",
    "numpy_dtype",
    "parse_op",
    "DTYPES",
    "OPS",
]
