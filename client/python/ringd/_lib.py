"""Finding and loading libringd, and the C declarations of ringd.h.

Nothing here knows about arrays: this module is the ctypes image of the
public header (codes, enums, the ringd_collective struct, prototypes) and
RingError, the exception every libringd failure becomes.

Where the library comes from, first match wins:
  1. $RINGD_LIBRARY, a path (an error if it cannot be loaded);
  2. the build tree of the source checkout this package sits in
     (<checkout>/build/client/libringd.so.0, where the README builds);
  3. the library installed together with this package (the path cmake
     --install writes into _paths.py);
  4. the system's search path (ctypes.util.find_library("ringd"), then
     libringd.so.0).
"""

import ctypes
import ctypes.util
import os
from pathlib import Path

_PKG_DIR = Path(__file__).resolve().parent

# Error codes of ringd.h (RINGD_ERRNO_MAP). Their values are on the wire and
# never change, so they are written out here rather than read from the library.
ERRORS = {
    -1: ("RINGD_EINVAL", "invalid argument"),
    -2: ("RINGD_ENOMEM", "out of memory"),
    -3: ("RINGD_ECONNECT", "cannot connect to the ringd daemon"),
    -4: ("RINGD_ECLOSED", "connection to the ringd daemon was closed"),
    -5: ("RINGD_EPROTO", "protocol error"),
    -6: ("RINGD_EVERSION", "protocol version mismatch"),
    -7: ("RINGD_ETIMEDOUT", "collective timed out"),
    -8: ("RINGD_ERING", "ring is down or a neighbour was lost"),
    -9: ("RINGD_EMISMATCH", "collective differs between ranks"),
    -10: ("RINGD_EABORTED", "collective aborted"),
    -11: ("RINGD_ESHM", "shared memory error"),
    -12: ("RINGD_EBUSY", "local rank already taken"),
    -13: ("RINGD_ERANGE", "buffer outside shared memory region"),
    -14: ("RINGD_ETOOBIG", "buffer too large"),
    -15: ("RINGD_EIO", "I/O error"),
    -16: ("RINGD_ESHUTDOWN", "daemon is shutting down"),
    -17: ("RINGD_EINPROGRESS", "request still in progress"),
    -18: ("RINGD_EAUTH", "authentication failed"),
    -19: ("RINGD_ECORRUPT", "data corrupted in transit"),
    -20: ("RINGD_EPERM", "not allowed to use this daemon"),
}
EINVAL, ENOMEM, ECONNECT, ECLOSED, EPROTO, EVERSION, ETIMEDOUT, ERING = range(-1, -9, -1)
EMISMATCH, EABORTED, ESHM, EBUSY, ERANGE, ETOOBIG, EIO, ESHUTDOWN = range(-9, -17, -1)
EINPROGRESS, EAUTH, ECORRUPT, EPERM = -17, -18, -19, -20

# ringd_dtype, ringd_op and ringd_coll: wire values.
DTYPES = {
    "int8": 0,
    "uint8": 1,
    "int32": 2,
    "int64": 3,
    "float16": 4,
    "bfloat16": 5,
    "float32": 6,
    "float64": 7,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
DTYPE_SIZES = {0: 1, 1: 1, 2: 4, 3: 8, 4: 2, 5: 2, 6: 4, 7: 8}
FLOAT_DTYPES = {4, 5, 6, 7}

OPS = {"sum": 0, "mean": 1, "min": 2, "max": 3, "prod": 4, "wmean": 5}
OP_ALIASES = {"avg": "mean", "average": "mean", "product": "prod"}
OP_NAMES = {v: k for k, v in OPS.items()}
SUM, MEAN, MIN, MAX, PROD, WMEAN = range(6)

COLL_ALLREDUCE, COLL_BROADCAST, COLL_ALLGATHER, COLL_REDUCE_SCATTER, COLL_BARRIER = range(1, 6)
COLL_NAMES = {1: "allreduce", 2: "broadcast", 3: "allgather", 4: "reduce_scatter", 5: "barrier"}

NAME_MAX = 64  # bytes of ringd_collective.name


class RingError(Exception):
    """A libringd call failed.

    code     the negative RINGD_E* code (ringd.ETIMEDOUT, ...)
    name     its name, "RINGD_ETIMEDOUT"
    message  the full message of ringd_last_error(): what failed and where,
             often the daemon's own explanation
    """

    def __init__(self, code, name, message):
        super().__init__(code, name, message)
        self.code = code
        self.name = name
        self.message = message

    def __str__(self):
        return f"{self.name}: {self.message}" if self.message else self.name


class WaitTimeout(RingError, TimeoutError):
    """Request.wait(timeout) ran out of time; the request is still running."""


def make_error(code, message):
    name, desc = ERRORS.get(code, (f"RINGD_E?({code})", "unknown error"))
    cls = WaitTimeout if code == EINPROGRESS else RingError
    return cls(code, name, message or desc)


# ringd_wire: how a float32 collective travels between hosts.
WIRE_CODES = {None: 0, "none": 1, "bfloat16": 2, "float16": 3}


class Collective(ctypes.Structure):
    """ringd_collective of ringd.h."""

    _fields_ = [
        ("kind", ctypes.c_int),
        ("buf", ctypes.c_void_p),
        ("input", ctypes.c_void_p),
        ("count", ctypes.c_size_t),
        ("dtype", ctypes.c_int),
        ("op", ctypes.c_int),
        ("root", ctypes.c_int),
        ("weight", ctypes.c_double),
        ("name", ctypes.c_char_p),
        ("timeout_ms", ctypes.c_uint32),
        ("wire_dtype", ctypes.c_int),
    ]


_vp = ctypes.c_void_p
_int = ctypes.c_int
_size = ctypes.c_size_t

# name: (restype, argtypes). The first group is required; the second
# (collectives and requests) is bound when the library has it.
_REQUIRED = {
    "ringd_connect": (_int, [ctypes.c_char_p, ctypes.POINTER(_vp)]),
    "ringd_close": (None, [_vp]),
    "ringd_rank": (_int, [_vp]),
    "ringd_size": (_int, [_vp]),
    "ringd_local_rank": (_int, [_vp]),
    "ringd_local_size": (_int, [_vp]),
    "ringd_allreduce": (_int, [_vp, _vp, _size, _int, _int]),
    "ringd_alloc": (_vp, [_vp, _size]),
    "ringd_free": (None, [_vp, _vp]),
    "ringd_strerror": (ctypes.c_char_p, [_int]),
    "ringd_errname": (ctypes.c_char_p, [_int]),
    "ringd_last_error": (ctypes.c_char_p, [_vp]),
}
_OPTIONAL = {
    "ringd_submit": (_int, [_vp, ctypes.POINTER(Collective), ctypes.POINTER(_vp)]),
    "ringd_wait": (_int, [_vp, _int]),
    "ringd_test": (_int, [_vp]),
    "ringd_run": (_int, [_vp, ctypes.POINTER(Collective)]),
}


def _candidates():
    """Paths or names to try, and whether the first one was asked for."""
    env = os.environ.get("RINGD_LIBRARY")
    if env:
        return [env], True
    out = []
    root = _PKG_DIR.parent.parent.parent
    if (root / "client" / "include" / "ringd.h").is_file():
        out.append(str(root / "build" / "client" / "libringd.so.0"))
    try:
        from . import _paths  # written by cmake --install

        out.append(_paths.LIBRARY)
    except ImportError:
        pass
    found = ctypes.util.find_library("ringd")
    if found:
        out.append(found)
    out += ["libringd.so.0", "libringd.so"]
    return out, False


class Library:
    """libringd loaded twice over: `c` releases the GIL during calls (every
    blocking call goes there), `py` keeps it (for the few calls that must not
    let another Python thread run in between, see Connection.close)."""

    def __init__(self, path):
        self.path = path
        self.c = ctypes.CDLL(path)
        self.py = ctypes.PyDLL(path)
        for table, required in ((_REQUIRED, True), (_OPTIONAL, False)):
            for name, (restype, argtypes) in table.items():
                for dll in (self.c, self.py):
                    try:
                        fn = getattr(dll, name)
                    except AttributeError:
                        if required:
                            raise OSError(f"{path} has no {name}: is it libringd?") from None
                        continue
                    fn.restype = restype
                    fn.argtypes = argtypes
        self.has_requests = all(hasattr(self.c, n) for n in _OPTIONAL)

    def last_error(self, client):
        msg = self.c.ringd_last_error(client)
        return msg.decode("utf-8", "replace") if msg else ""

    def error(self, code, client):
        """The RingError of a failed call on client (None: ringd_connect)."""
        return make_error(code, self.last_error(client))


_lib = None


def load():
    """The process's Library, loaded on first use. Raises OSError naming every
    place tried when libringd cannot be found."""
    global _lib
    if _lib is not None:
        return _lib
    names, explicit = _candidates()
    tried = []
    for name in names:
        if os.sep in name and not os.path.exists(name):
            tried.append(f"{name}: no such file")
            continue
        try:
            _lib = Library(name)
            return _lib
        except OSError as e:
            tried.append(str(e))
            if explicit:
                break
    hint = (
        "set RINGD_LIBRARY to the path of libringd.so.0"
        if not explicit
        else "RINGD_LIBRARY must name a loadable libringd.so"
    )
    raise OSError("cannot load libringd (" + "; ".join(tried) + "); " + hint)
