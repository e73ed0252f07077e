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
Failures raise ringd.RingError(code, name, message); a collective cut short
by a change of the ring's membership raises its subclass ringd.ResizedError
(ringd.elastic keeps training through it).

ringd.report() says where every rank of the ring spent its time (compute,
wait, transfer, failure; speedup, energy), as `ringctl report --json` does;
ringd.report_line() sums it up in one line.

libringd is found by itself ($RINGD_LIBRARY overrides; see ringd._lib).
PyTorch helpers are in ringd.torch; batches split by the ranks' measured
speeds, so that uneven machines finish together, in ringd.balance.
"""

import importlib

from ._lib import ResizedError, RingError, WaitTimeout

__version__ = "0.1.0"

# Loaded on first use (PEP 562), so that importing the package needs neither
# NumPy (ringd.launch does without it) nor the library: the connection and
# array functions come from ._core, the error codes and the DTYPES and OPS
# names from libringd's own tables.
_FROM_CORE = (
    "Connection",
    "Request",
    "connect",
    "default_connection",
    "dtype_code",
    "init",
    "numpy_dtype",
    "parse_op",
)


# From ._report: they need neither NumPy nor a connection.
_FROM_REPORT = ("report", "report_line", "final_report")


def __getattr__(name):
    if name == "__all__":
        # The error codes (EINVAL, ...) are the library's: listed when it loads.
        from . import _lib

        try:
            return sorted(c for c in _lib.load().tables.constants if c.startswith("E")) + _ALL
        except OSError:  # no library: what does not come from it (pydoc still works)
            return [n for n in _ALL if n not in ("DTYPES", "OPS")]
    if name in _FROM_CORE:
        return getattr(importlib.import_module("._core", __name__), name)
    if name in _FROM_REPORT:
        return getattr(importlib.import_module("._report", __name__), name)
    from . import _lib

    if name == "DTYPES":
        return tuple(_lib.DTYPES)
    if name == "OPS":
        return tuple(_lib.OPS)
    if name.startswith("E") and name.isupper():
        try:
            return _lib.load().tables.constants[name]
        except KeyError:
            pass
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__getattr__("__all__")))


def library_path():
    """Where the libringd in use was loaded from (loading it if needed)."""
    from . import _lib

    return _lib.load().path


_ALL = [
    "Connection",
    "Request",
    "ResizedError",
    "RingError",
    "WaitTimeout",
    "connect",
    "default_connection",
    "init",
    "library_path",
    "dtype_code",
    "numpy_dtype",
    "parse_op",
    "report",
    "report_line",
    "final_report",
    "DTYPES",
    "OPS",
]
