"""Finding and loading libringd, and the C declarations of ringd.h.

Nothing here knows about arrays: this module is the ctypes image of the
public header (the ringd_collective struct, prototypes) and RingError, the
exception every libringd failure becomes. The header's codes and enums come
from the library itself, when it is loaded (Tables), so importing the
package needs no library: the first call that needs one loads it.

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

NAME_MAX = 64  # bytes of ringd_collective.name

# Op spellings of PyTorch's ReduceOp that libringd does not know.
OP_ALIASES = {"average": "mean", "product": "prod"}


class Tables:
    """The names and values of ringd.h's enums, read from the library itself
    (ringd_errname, ringd_strerror, ringd_dtype_name/size, ringd_op_name,
    ringd_coll_name), so that Python never holds a copy that could drift.

    errors       code -> (name, description), e.g. -7 -> ("RINGD_ETIMEDOUT", ...)
    dtypes       name -> value, e.g. "float32" -> 6; dtype_names the reverse
    dtype_sizes  value -> bytes per element
    ops          name -> value, e.g. "sum" -> 0; op_names the reverse
    colls        name -> value, e.g. "allreduce" -> 1; coll_names the reverse
    """

    def __init__(self, c):
        self.errors = {}
        code = -1
        while True:  # the codes are -1, -2, ... with no gap (ringd.h)
            name = c.ringd_errname(code).decode()
            if not name.startswith("RINGD_E") or name == "RINGD_E?":
                break
            self.errors[code] = (name, c.ringd_strerror(code).decode())
            code -= 1
        self.dtypes = self._enum(c.ringd_dtype_name, 0)
        self.dtype_names = {v: k for k, v in self.dtypes.items()}
        self.dtype_sizes = {v: c.ringd_dtype_size(v) for v in self.dtype_names}
        self.ops = self._enum(c.ringd_op_name, 0)
        self.op_names = {v: k for k, v in self.ops.items()}
        self.colls = self._enum(c.ringd_coll_name, 1)
        self.coll_names = {v: k for k, v in self.colls.items()}
        # Module attributes: EINVAL, ..., SUM, ..., COLL_ALLREDUCE, ...
        self.constants = {name[len("RINGD_"):]: code for code, (name, _) in self.errors.items()}
        self.constants.update({k.upper(): v for k, v in self.ops.items()})
        self.constants.update({"COLL_" + k.upper(): v for k, v in self.colls.items()})

    @staticmethod
    def _enum(name_of, first):
        """name -> value for values first, first + 1, ... until the library
        has no name for one."""
        out = {}
        value = first
        while True:
            name = name_of(value)
            if not name:
                return out
            out[name.decode()] = value
            value += 1


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


class ResizedError(RingError):
    """A collective failed because the ring's membership changed
    (RINGD_ERESIZED): a host went out of the ring or came back. It fails on
    every rank, once per resize, with a message such as "ring resized to 3
    hosts (3 ranks): h4 unreachable for 10 s". The connection's rank and
    size are already those of the new ring, on which the next collective
    runs; ringd.elastic restores and re-synchronises the training state."""


def make_error(code, message):
    """The RingError of a libringd code: WaitTimeout for EINPROGRESS,
    ResizedError for ERESIZED."""
    t = load().tables
    name, desc = t.errors.get(code, (f"RINGD_E?({code})", "unknown error"))
    if code == t.constants["EINPROGRESS"]:
        cls = WaitTimeout
    elif code == t.constants.get("ERESIZED"):
        cls = ResizedError
    else:
        cls = RingError
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


class MembershipInfo(ctypes.Structure):
    """ringd_membership_info of ringd.h."""

    _fields_ = [
        ("epoch", ctypes.c_uint32),
        ("rank", ctypes.c_int),
        ("size", ctypes.c_int),
        ("n_live", ctypes.c_int),
        ("n_configured", ctypes.c_int),
        ("live", ctypes.c_uint64),
        ("ready", ctypes.c_int),
        ("hosts", ctypes.c_char * 1025),
    ]


class Split(ctypes.Structure):
    """ringd_split of ringd.h."""

    _fields_ = [
        ("step", ctypes.c_uint64),
        ("global_batch", ctypes.c_uint64),
        ("resplits", ctypes.c_uint32),
        ("every", ctypes.c_uint32),
        ("n_ranks", ctypes.c_int),
        ("rows", ctypes.POINTER(ctypes.c_uint32)),
        ("rate", ctypes.POINTER(ctypes.c_double)),
    ]


_vp = ctypes.c_void_p
_int = ctypes.c_int
_size = ctypes.c_size_t

# name: (restype, argtypes) of every function used.
_PROTOTYPES = {
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
    "ringd_dtype_name": (ctypes.c_char_p, [_int]),
    "ringd_dtype_size": (_size, [_int]),
    "ringd_op_name": (ctypes.c_char_p, [_int]),
    "ringd_coll_name": (ctypes.c_char_p, [_int]),
    "ringd_dtype_parse": (_int, [ctypes.c_char_p]),
    "ringd_op_parse": (_int, [ctypes.c_char_p]),
    "ringd_submit": (_int, [_vp, ctypes.POINTER(Collective), ctypes.POINTER(_vp)]),
    "ringd_wait": (_int, [_vp, _int]),
    "ringd_test": (_int, [_vp]),
    "ringd_run": (_int, [_vp, ctypes.POINTER(Collective)]),
    "ringd_gather": (_int, [_vp, _vp, _vp, _size, _int, _int]),
    "ringd_scatter": (_int, [_vp, _vp, _vp, _size, _int, _int]),
    "ringd_alltoall": (_int, [_vp, _vp, _vp, _size, _int]),
    "ringd_membership": (_int, [_vp, ctypes.POINTER(MembershipInfo)]),
    "ringd_report_split": (_int, [_vp, ctypes.POINTER(Split)]),
    "ringd_report_json": (_int, [ctypes.c_char_p, ctypes.POINTER(_vp)]),
    "ringd_report_free": (None, [_vp]),
}


def checkout_root():
    """The source checkout whose client/python/ringd this package is, or None
    (an installed package)."""
    root = _PKG_DIR.parent.parent.parent
    return root if (root / "client" / "include" / "ringd.h").is_file() else None


def _candidates():
    """Paths or names to try, and whether the first one was asked for."""
    env = os.environ.get("RINGD_LIBRARY")
    if env:
        return [env], True
    out = []
    root = checkout_root()
    if root is not None:
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
        for name, (restype, argtypes) in _PROTOTYPES.items():
            for dll in (self.c, self.py):
                try:
                    fn = getattr(dll, name)
                except AttributeError:
                    raise OSError(
                        f"{path} has no {name}: is it libringd, and as new as this package?"
                    ) from None
                fn.restype = restype
                fn.argtypes = argtypes
        self.tables = Tables(self.c)

    def last_error(self, client):
        msg = self.c.ringd_last_error(client)
        return msg.decode("utf-8", "replace") if msg else ""

    def error(self, code, client):
        """The RingError of a failed call on client (None: ringd_connect)."""
        return make_error(code, self.last_error(client))


def __getattr__(name):
    """The constants of ringd.h (EINVAL, ..., SUM, ..., COLL_ALLREDUCE, ...)
    and the tables (DTYPES, OPS, ...), read from the library on first use."""
    table = {
        "ERRORS": "errors",
        "DTYPES": "dtypes",
        "DTYPE_NAMES": "dtype_names",
        "DTYPE_SIZES": "dtype_sizes",
        "OPS": "ops",
        "OP_NAMES": "op_names",
        "COLLS": "colls",
        "COLL_NAMES": "coll_names",
    }.get(name)
    if table is None and not name.isupper():
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    tables = load().tables
    if table is not None:
        return getattr(tables, table)
    try:
        return tables.constants[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


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
