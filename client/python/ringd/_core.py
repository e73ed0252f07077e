"""Connection and Request: the NumPy face of libringd.

A Connection owns one ringd_client. Every call into the library holds the
connection's lock (a ringd_client is not thread-safe) and releases the GIL, so
other threads run while a collective is on the ring.

Collectives go through ringd_submit(): the blocking forms submit and then wait
in slices of WAIT_SLICE_MS, so that Ctrl-C interrupts a long wait in Python
(the request, and the arrays it uses, stay owned by the connection until the
library is done with them). Requests complete in submission order, so waiting
for one first finishes every earlier one; each keeps its own result or error.

A process is one rank, so it has one connection: connect() makes it when
there is none and returns it afterwards (ringd.torch, its torch.distributed
backend and this module's users all share it); asking for another daemon's
socket while it is open fails, saying so.

A request with a done callback (Request.add_done_callback, which the
torch.distributed backend's futures use) completes even if nobody waits for
it: the connection's progress thread polls the oldest request while any
such callback is pending, holding the lock only for each poll.

Arrays from Connection.empty() live in memory from ringd_alloc(), which
ringd_close() unmaps. Closing while such arrays are still referenced would
leave them dangling, so close() first copies their contents, and right after
ringd_close() maps private anonymous memory at the same addresses and copies
the contents back: the arrays stay valid and become ordinary memory.
"""

import collections
import ctypes
import mmap
import os
import sys
import threading
import time
import warnings
import weakref

import numpy as np

from . import _lib
from ._lib import make_error

WAIT_SLICE_MS = 100
# Poll interval of the progress thread: from the first to the second, doubling
# while nothing completes.
PROGRESS_PAUSE_S = (0.0002, 0.002)
DEFAULT_SOCKET = "/run/ringd/ringd.sock"  # ringd.h: ringd_connect() with NULL

_PROT_RW = mmap.PROT_READ | mmap.PROT_WRITE
_MAP_PRIVATE_ANON = mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0x20)
_MAP_FIXED_NOREPLACE = getattr(mmap, "MAP_FIXED_NOREPLACE", 0x100000)
_MAP_FAILED = ctypes.c_void_p(-1).value
_PAGE = mmap.PAGESIZE

_libc = ctypes.PyDLL(None)  # PyDLL: mmap/munmap run without releasing the GIL
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


# ---- names and types --------------------------------------------------------

def _tables():
    return _lib.load().tables


def _bf16():
    return _tables().dtypes["bfloat16"]


def parse_op(op):
    """The ringd_op value of "sum", "mean", ... (any spelling libringd's
    ringd_op_parse() takes, and PyTorch's "average" and "product"), or of
    an int value."""
    t = _tables()
    if isinstance(op, str):
        name = _lib.OP_ALIASES.get(op.lower(), op)
        value = _lib.load().c.ringd_op_parse(name.encode())
        if value >= 0:
            return value
    elif isinstance(op, int) and not isinstance(op, bool) and op in t.op_names:
        return op
    raise ValueError(f"unknown op {op!r}: expected one of {', '.join(t.ops)}")


def _delivered(result, copy_back):
    """A request's on_done: writes a staged result back (copy_back, or None)
    and gives the array the caller gets."""

    def done():
        if copy_back:
            copy_back()
        return result

    return done


def parse_op_weight(op, weight, what):
    """The ringd_op value of op, checked against weight: wmean needs one, the
    other ops take none."""
    opv = parse_op(op)
    if opv == _lib.WMEAN and weight is None:
        raise ValueError(f"{what}: op 'wmean' needs weight= (this rank's weight)")
    if opv != _lib.WMEAN and weight is not None:
        raise ValueError(f"{what}: weight= is for op 'wmean' only, not {_lib.OP_NAMES[opv]!r}")
    return opv


def parse_wire(wire_dtype, what):
    """The ringd_wire value of wire_dtype: None (the daemon's wire_dtype),
    "none" (float32 as is), "bfloat16" or "float16"."""
    key = wire_dtype.lower() if isinstance(wire_dtype, str) else wire_dtype
    if key not in _lib.WIRE_CODES:
        raise ValueError(
            f"{what}: wire_dtype must be None, 'none', 'bfloat16' or 'float16', not {wire_dtype!r}"
        )
    return _lib.WIRE_CODES[key]


def dtype_code(dtype):
    """The ringd_dtype value of a NumPy dtype (or anything np.dtype() takes) or
    of a ringd dtype name such as "bfloat16"."""
    t = _tables()
    if isinstance(dtype, str) and _lib.load().c.ringd_dtype_parse(dtype.encode()) == _bf16():
        return _bf16()
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"unknown dtype {dtype!r}") from None
    # NumPy's names are ringd's (and ml_dtypes' bfloat16 is "bfloat16").
    code = t.dtypes.get(dt.name)
    if code is None or not dt.isnative:
        raise TypeError(
            f"ringd has no element type for {dt} (it reduces "
            f"{', '.join(t.dtypes)} in native byte order)"
        )
    return code


def _array_code(arr, dtype, what):
    """The ringd dtype for arr, with the dtype= override checked: "bfloat16"
    on a 2-byte integer array says the array holds bfloat16 bit patterns."""
    if dtype is None:
        try:
            return dtype_code(arr.dtype)
        except TypeError as e:
            raise TypeError(f"{what}: {e}") from None
    code = dtype_code(dtype)
    if code == _bf16():
        if arr.dtype.name == "bfloat16" or (arr.dtype.kind in "iu" and arr.dtype.itemsize == 2):
            return code
        raise TypeError(
            f"{what}: dtype='bfloat16' needs an array of 16-bit integers holding the "
            f"bit patterns (uint16), got {arr.dtype}"
        )
    if code != dtype_code(arr.dtype):
        raise TypeError(f"{what}: dtype={dtype!r} does not describe an array of {arr.dtype}")
    return code


def numpy_dtype(dtype):
    """The NumPy dtype that holds elements of a ringd dtype: bfloat16 is held
    as uint16 (its bit patterns)."""
    if dtype_code(dtype) == _bf16() and not (
        not isinstance(dtype, str) and np.dtype(dtype).name == "bfloat16"
    ):
        return np.dtype(np.uint16)
    return np.dtype(dtype)


def _name_bytes(name, what):
    if name is None:
        return None
    b = str(name).encode("utf-8")
    if len(b) > _lib.NAME_MAX:
        raise ValueError(f"{what}: name {name!r} is longer than {_lib.NAME_MAX} bytes")
    return b


def _timeout_ms(timeout, what):
    if timeout is None:
        return 0
    ms = int(round(float(timeout) * 1000))
    if not 1 <= ms <= 0xFFFFFFFF:
        raise ValueError(f"{what}: timeout {timeout!r} s is out of range")
    return ms


def _inplace(arr, what):
    """(work, copy_back) for an in-place collective on arr: work is arr itself
    when C-contiguous, else a contiguous copy whose result copy_back() puts
    back into arr."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"{what}: expected a numpy.ndarray, got {type(arr).__name__}")
    if not arr.flags.writeable:
        raise ValueError(f"{what}: the array is read-only and the result is written in place")
    if arr.flags.c_contiguous:
        return arr, None
    work = np.ascontiguousarray(arr)

    def copy_back():
        arr[...] = work

    return work, copy_back


# ---- shared memory ----------------------------------------------------------


class _Shm:
    """One block from ringd_alloc(): "shared" while the client has it,
    "private" once close() moved it to anonymous memory, "gone" when freed."""

    __slots__ = ("addr", "size", "mapped", "state", "dead")

    def __init__(self, addr, size):
        self.addr = addr
        self.size = size
        self.mapped = (size + _PAGE - 1) // _PAGE * _PAGE
        self.state = "shared"
        self.dead = False  # no array refers to it any more


class _ShmOwner:
    """The base object of every array over a _Shm: while any view exists, it
    exists; when the last one goes, the block is released."""

    __slots__ = ("__array_interface__", "__weakref__")

    def __init__(self, shm):
        self.__array_interface__ = {
            "data": (shm.addr, False),
            "shape": (shm.size,),
            "typestr": "|u1",
            "version": 3,
        }


def _shm_released(state, shm):
    """Finalizer of a _ShmOwner. It may run in any thread, in the middle of
    anything, even of a call on this connection: ringd_free() waits for the
    next call on the connection (State.flush); private memory is unmapped at
    once unless the connection is busy or closing (then close() or the next
    flush does it)."""
    shm.dead = True
    if shm.state == "private" and not state.closing and state.lock.acquire(blocking=False):
        try:
            if shm.state == "private":
                _libc.munmap(shm.addr, shm.mapped)
                shm.state = "gone"
                state.shms.pop(id(shm), None)
        finally:
            state.lock.release()
    else:
        state.dead.append(shm)


# ---- the connection state -------------------------------------------------------


class _State:
    """What a Connection owns, apart from the Connection object itself, so that
    a finalizer can close it when the Connection is garbage."""

    def __init__(self, lib, ptr, path):
        self.lib = lib
        self.ptr = ptr
        self.path = path
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.pending = collections.deque()  # Requests in submission order
        self.shms = {}  # id -> _Shm not yet freed
        self.dead = []  # _Shm whose arrays are all gone, to free
        self.closing = False
        self.progress = None  # the thread completing requests with callbacks
        # This rank's place, as libringd last said: a resize changes it.
        self.rank = lib.c.ringd_rank(ptr)
        self.size = lib.c.ringd_size(ptr)

    def refresh_place(self):
        """Reads rank and size from libringd again (lock held), after a
        failure that may have been a resize."""
        if self.ptr is not None:
            self.rank = self.lib.c.ringd_rank(self.ptr)
            self.size = self.lib.c.ringd_size(self.ptr)

    def start_progress(self):
        """Starts the progress thread unless it runs (lock held)."""
        if self.progress is None:
            self.progress = threading.Thread(
                target=_progress, args=(self,), name="ringd-progress", daemon=True
            )
            self.progress.start()

    def check(self, what):
        if self.ptr is None:
            raise make_error(_lib.ECLOSED, f"{what}: the connection is closed; connect again")
        if self.pid != os.getpid():
            raise make_error(
                _lib.ECLOSED,
                f"{what}: the connection was opened in process {self.pid}, before a fork; "
                "connect again in this process",
            )

    def flush(self):
        """Frees the blocks whose arrays are gone (lock held). Only while no
        request is in flight, so that nothing still uses them."""
        if self.pending or not self.dead:
            return
        while self.dead:
            shm = self.dead.pop()
            if shm.state == "shared" and self.ptr is not None:
                self.lib.c.ringd_free(self.ptr, shm.addr)
            elif shm.state == "private":
                _libc.munmap(shm.addr, shm.mapped)
            shm.state = "gone"
            self.shms.pop(id(shm), None)

    def close(self):
        with self.lock:
            if self.ptr is None:
                return
            if self.pid != os.getpid():
                self.ptr = None  # the parent's client: not ours to close
                return
            # Finish what already completed; fail the rest.
            for req in list(self.pending):
                if not req._finish_one(0):
                    break
            for req in list(self.pending):
                req._complete(
                    make_error(_lib.ECLOSED, f"{req._what}: the connection was closed first")
                )
            self.closing = True
            live = [s for s in self.shms.values() if s.state == "shared" and not s.dead]
            saved = [ctypes.string_at(s.addr, s.size) for s in live]
            ptr, self.ptr = self.ptr, None
            lost = self._close_and_remap(ptr, live)
            for s, data in zip(live, saved):
                if s.state == "private":
                    ctypes.memmove(s.addr, data, s.size)
            for s in list(self.shms.values()):
                if s.state == "shared" or (s.state == "private" and s.dead):
                    if s.state == "private":
                        _libc.munmap(s.addr, s.mapped)
                    s.state = "gone"
                if s.state == "gone":
                    self.shms.pop(id(s), None)
            self.dead.clear()
            self.closing = False
        if lost:
            warnings.warn(
                f"ringd: {lost} array(s) from Connection.empty() could not be kept "
                "after close() and must not be used any more",
                RuntimeWarning,
                stacklevel=3,
            )

    def _close_and_remap(self, ptr, live):
        """ringd_close(), then private memory at the addresses of the live
        blocks, with no other Python thread running in between (it could map
        something there). Returns how many blocks could not be kept."""
        if not live:
            self.lib.c.ringd_close(ptr)
            return 0
        lost = 0
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1000.0)
        try:
            self.lib.py.ringd_close(ptr)
            for s in live:
                got = _libc.mmap(
                    s.addr, s.mapped, _PROT_RW, _MAP_PRIVATE_ANON | _MAP_FIXED_NOREPLACE, -1, 0
                )
                if got == s.addr:
                    s.state = "private"
                else:
                    if got not in (None, _MAP_FAILED):
                        _libc.munmap(got, s.mapped)
                    s.state = "gone"
                    lost += 1
        finally:
            sys.setswitchinterval(interval)
        return lost


def _progress(state):
    """The progress thread: completes the oldest request, in a loop, while a
    pending request has a done callback; sleeps between polls, without the
    lock, so that submissions go on meanwhile."""
    pause = PROGRESS_PAUSE_S[0]
    while True:
        with state.lock:
            if state.ptr is None or not any(r._callbacks for r in state.pending):
                state.progress = None
                return
            done = state.pending[0]._advance(0)
        if done:
            pause = PROGRESS_PAUSE_S[0]
        else:
            time.sleep(pause)
            pause = min(2 * pause, PROGRESS_PAUSE_S[1])


def _finalize_state(state):
    try:
        state.close()
    except Exception:  # never raise from a finalizer
        pass


# ---- requests ---------------------------------------------------------------


class Request:
    """A collective in flight, from the *_async methods.

    wait(timeout=None) returns its result (the array, or None for a barrier)
    or raises its RingError; with a timeout in seconds it raises
    ringd.WaitTimeout (a TimeoutError) if the time runs out first, and the
    request stays valid. test() says whether it has completed, without
    blocking. The arrays given to the collective are kept alive, and must not
    be touched, until it completes.
    """

    def __init__(self, state, what, keep, on_done):
        self._state = state
        self._what = what
        self._ptr = ctypes.c_void_p()
        self._keep = keep
        self._on_done = on_done
        self._done = False
        self._result = None
        self._error = None
        self._callbacks = []

    def __repr__(self):
        status = "pending" if not self._done else ("failed" if self._error else "done")
        return f"<ringd.Request {self._what} {status}>"

    @property
    def done(self):
        """True once the request completed, successfully or not."""
        return self._done

    def _complete(self, error):
        """Records the outcome (lock held). The request leaves the queue."""
        try:
            self._state.pending.remove(self)
        except ValueError:
            pass
        self._ptr = None
        if error is None and self._on_done is not None:
            try:
                self._result = self._on_done()
            except Exception as e:  # a failed copy-back
                error = e
        self._error = error
        self._keep = self._on_done = None
        self._done = True
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            self._call(fn)

    def _call(self, fn):
        try:
            fn(self)
        except Exception as e:  # noqa: BLE001 - nobody to hand it to
            warnings.warn(f"ringd: a done callback of {self._what} raised {e!r}", RuntimeWarning)

    def add_done_callback(self, fn):
        """Calls fn(request) once the request has completed: now if it has,
        else in the thread that completes it (whoever waits, or the
        connection's progress thread), with the connection's lock held."""
        with self._state.lock:
            if not self._done:
                self._callbacks.append(fn)
                self._state.start_progress()
                return
        self._call(fn)

    def exception(self):
        """The request's error (a RingError) once it has completed, or None."""
        return self._error

    def _finish_one(self, timeout_ms):
        """ringd_wait() on this request alone (lock held); True if complete."""
        if self._done:
            return True
        state = self._state
        rc = state.lib.c.ringd_wait(self._ptr, timeout_ms)
        if rc == _lib.EINPROGRESS:
            return False
        if rc < 0:
            state.refresh_place()  # before anybody hears of a ResizedError
        self._complete(state.lib.error(rc, state.ptr) if rc < 0 else None)
        return True

    def _advance(self, timeout_ms):
        """Completes the requests before this one, then this one (lock held)."""
        if self._done:
            return True
        if self._state.pid != os.getpid():
            self._complete(make_error(_lib.ECLOSED, f"{self._what}: submitted before a fork"))
            return True
        for req in list(self._state.pending):
            if not req._finish_one(timeout_ms):
                return False
            if req is self:
                return True
        return self._done

    def test(self):
        """True if the request has completed (then wait() returns at once)."""
        with self._state.lock:
            return self._advance(0)

    def wait(self, timeout=None):
        """Waits for completion; returns the result or raises the error."""
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        while True:
            if deadline is None:
                slice_ms = WAIT_SLICE_MS
            else:
                left = deadline - time.monotonic()
                slice_ms = max(0, min(WAIT_SLICE_MS, int(left * 1000)))
            with self._state.lock:
                done = self._advance(slice_ms)
            if done:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise make_error(
                    _lib.EINPROGRESS, f"{self._what}: not complete after {timeout} s"
                )
        if self._error is not None:
            raise self._error
        return self._result


# ---- the connection -------------------------------------------------------------


class Connection:
    """A training process's connection to its host's ringd daemon.

    Made by ringd.connect(). Attributes rank, size, local_rank, local_size;
    in an elastic ring rank and size change with the membership (they are
    the new ring's once a collective raised ringd.ResizedError).
    Collectives work on NumPy arrays: in place ones (allreduce, broadcast)
    return the array they were given; the others return a new array, or fill
    out= when given. Every collective takes name= (up to 64 bytes, used in
    error messages) and timeout= (seconds; default the daemon's
    collective_timeout). Every rank must make the same sequence of collectives
    with the same shapes, dtypes and ops. Failures raise ringd.RingError with
    the library's or the daemon's message.
    """

    def __init__(self, path=None):
        global _shared
        with _shared_lock:
            current = _shared_connection()
            if current is not None:
                raise _one_rank_only(current, path, "ringd.Connection()")
            self._open(path)
            _shared = self

    def _open(self, path):
        lib = _lib.load()
        ptr = ctypes.c_void_p()
        arg = None if path is None else os.fsencode(path)
        rc = lib.c.ringd_connect(arg, ctypes.byref(ptr))
        if rc < 0:
            raise lib.error(rc, None)
        where = os.fspath(path) if path is not None else os.environ.get("RINGD_SOCKET")
        self._state = _State(lib, ptr.value, where or DEFAULT_SOCKET)
        self._finalizer = weakref.finalize(self, _finalize_state, self._state)
        c = lib.c
        self.local_rank = c.ringd_local_rank(ptr)
        self.local_size = c.ringd_local_size(ptr)
        self._agreed = set()  # digests that ringd._agree.check_same() passed

    @property
    def path(self):
        """The socket of the daemon this connection went to."""
        return self._state.path

    @property
    def rank(self):
        """This process's rank among all ranks of the ring (the new ring's
        after a ringd.ResizedError)."""
        return self._state.rank

    @property
    def size(self):
        """The number of ranks in the ring (the new ring's after a
        ringd.ResizedError)."""
        return self._state.size

    def membership(self):
        """The ring's membership, asked of the daemon (blocks for at most a
        few seconds; waits for no collective):

            {"epoch": 7,              # ring epoch the membership was agreed in
             "rank": 2, "size": 3,    # this process's place in the ring
             "ready": True,           # the ring runs collectives now
             "hosts": ["h1", ...],    # configured host names, in order
             "live": ["h1", ...],     # those in the ring
             "out": ["h4"]}           # those out of it

        A daemon without elastic rings reports every host live and epoch 0,
        and hosts it does not name are "#1", "#2", ... by position. rank and
        size of the connection are refreshed too."""
        state = self._state
        info = _lib.MembershipInfo()
        with state.lock:
            state.check("membership")
            rc = state.lib.c.ringd_membership(state.ptr, ctypes.byref(info))
            state.refresh_place()
            if rc < 0:
                raise state.lib.error(rc, state.ptr)
        hosts = info.hosts.decode("utf-8", "replace").split()
        # A daemon that does not name its hosts (or a list cut short): by
        # position, as ringctl status shows them.
        hosts += [f"#{i + 1}" for i in range(len(hosts), info.n_configured)]
        inside = [i < 64 and bool(info.live >> i & 1) for i in range(len(hosts))]
        return {
            "epoch": info.epoch,
            "rank": info.rank,
            "size": info.size,
            "ready": bool(info.ready),
            "hosts": hosts,
            "live": [h for h, x in zip(hosts, inside) if x],
            "out": [h for h, x in zip(hosts, inside) if not x],
        }

    def report_split(self, rows, rates, *, step=0, resplits=0, every=0):
        """Tells this host's daemon how a job that balances its batches by
        speed splits each global batch: rank i takes rows[i] rows, at a
        measured rates[i] rows per second (0: not measured yet). `ringctl
        status` shows it (the first 64 ranks). ringd.balance.Balancer calls
        it after each re-split; it blocks for a round trip to the daemon and
        waits for no collective. step, resplits and every are shown with it."""
        rows = [int(r) for r in rows]
        rates = [float(r) for r in rates]
        if not rows or len(rows) != len(rates):
            raise ValueError(
                f"report_split: rows ({len(rows)}) and rates ({len(rates)}) need one entry "
                "per rank, at least one"
            )
        if any(not 0 <= r <= 0xFFFFFFFF for r in rows):
            raise ValueError(f"report_split: rows out of range: {rows}")
        n = len(rows)
        split = _lib.Split(
            step=int(step), global_batch=sum(rows), resplits=int(resplits), every=int(every),
            n_ranks=n, rows=(ctypes.c_uint32 * n)(*rows), rate=(ctypes.c_double * n)(*rates),
        )
        state = self._state
        with state.lock:
            state.check("report_split")
            rc = state.lib.c.ringd_report_split(state.ptr, ctypes.byref(split))
            if rc < 0:
                raise state.lib.error(rc, state.ptr)

    def __repr__(self):
        status = "closed" if self.closed else f"rank {self.rank} of {self.size}"
        local = f"local {self.local_rank} of {self.local_size}"
        return f"<ringd.Connection {status} ({local}) at {self.path}>"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def closed(self):
        return self._state.ptr is None

    def close(self):
        """Closes the connection. Requests still in flight fail with
        RINGD_ECLOSED. Arrays from empty() stay usable, as private memory
        holding their last contents. Idempotent. The next connect() makes a
        new connection."""
        self._state.close()

    # ---- shared memory ----

    def empty(self, shape, dtype=np.float32):
        """A C-contiguous array in memory shared with the daemon (zero-filled):
        collectives on it, or on any view of it, copy nothing. dtype
        "bfloat16" gives a uint16 array of bit patterns (pass
        dtype="bfloat16" to the collectives). The memory is released when the
        last array over it is gone."""
        npdt = numpy_dtype(dtype)
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * npdt.itemsize
        if nbytes == 0:
            return np.empty(shape, npdt)
        state = self._state
        with state.lock:
            state.check("empty")
            state.flush()
            addr = state.lib.c.ringd_alloc(state.ptr, nbytes)
            if not addr:
                raise state.lib.error(_lib.ENOMEM, state.ptr)
            shm = _Shm(addr, nbytes)
            state.shms[id(shm)] = shm
        owner = _ShmOwner(shm)
        weakref.finalize(owner, _shm_released, state, shm)
        return np.asarray(owner).view(npdt).reshape(shape)

    zeros = empty  # the memory is zero-filled

    def empty_like(self, array, dtype=None):
        """empty() with array's shape and dtype."""
        return self.empty(array.shape, array.dtype if dtype is None else dtype)

    # ---- submitting ----

    def _submit(self, what, coll, keep, on_done):
        """Submits coll; returns its Request. keep: objects to hold until it
        completes; on_done(): called on success, gives the result."""
        state = self._state
        with state.lock:
            state.check(what)
            state.flush()
            req = Request(state, what, (coll, keep), on_done)
            lib = state.lib
            rc = lib.c.ringd_submit(state.ptr, ctypes.byref(coll), ctypes.byref(req._ptr))
            if rc < 0:
                raise lib.error(rc, state.ptr)
            state.pending.append(req)
            return req

    def _submit_ptr(self, kind, what, *, buf=None, input=None, count=0, code=0, op=None,
                    weight=None, root=0, keep=None, on_done=None, name=None, timeout=None,
                    wire=None):
        """Submits a collective of kind on raw addresses: buf (and input) of
        count elements of ringd dtype code, as ringd_collective describes;
        keep holds them valid until it completes, on_done() gives the
        Request's result. op and weight are checked for the reductions; wire
        is a wire_dtype (parse_wire()). Returns the Request. Also the way in
        for front ends (ringd.torch)."""
        reduces = kind in (_lib.COLL_ALLREDUCE, _lib.COLL_REDUCE_SCATTER)
        opv = parse_op_weight(op, weight, what) if reduces else 0
        coll = _lib.Collective(
            kind=kind,
            buf=buf if count else None,
            input=input if count else None,
            count=count,
            dtype=code,
            op=opv,
            root=int(root),
            weight=0.0 if weight is None else float(weight),
            wire_dtype=parse_wire(wire, what),
        )
        coll.name = _name_bytes(name, what)
        coll.timeout_ms = _timeout_ms(timeout, what)
        return self._submit(what, coll, keep, on_done)

    def _allreduce_req(self, array, op, weight, dtype, name, timeout, what="allreduce", wire=None):
        parse_op_weight(op, weight, what)
        work, copy_back = _inplace(array, what)
        return self._submit_ptr(
            _lib.COLL_ALLREDUCE, what, buf=work.ctypes.data, count=work.size,
            code=_array_code(array, dtype, what), op=op, weight=weight, keep=(array, work),
            on_done=_delivered(array, copy_back), name=name, timeout=timeout, wire=wire,
        )

    def _broadcast_req(self, array, root, dtype, name, timeout, what="broadcast"):
        work, copy_back = _inplace(array, what)
        return self._submit_ptr(
            _lib.COLL_BROADCAST, what, buf=work.ctypes.data, count=work.size,
            code=_array_code(array, dtype, what), root=root, keep=(array, work),
            on_done=_delivered(array, copy_back), name=name, timeout=timeout,
        )

    def _out_array(self, out, shape, npdt, what):
        """(out, work, copy_back) for a result of shape and dtype."""
        if out is None:
            out = np.empty(shape, npdt)
            return out, out, None
        if not isinstance(out, np.ndarray):
            raise TypeError(f"{what}: out must be a numpy.ndarray, got {type(out).__name__}")
        if out.shape != tuple(shape) or out.dtype != npdt:
            raise ValueError(
                f"{what}: out has shape {out.shape} and dtype {out.dtype}, "
                f"expected {tuple(shape)} and {npdt}"
            )
        work, copy_back = _inplace(out, what)
        return out, work, copy_back

    def _allgather_req(self, array, out, dtype, name, timeout, what="allgather", wire=None):
        src = np.ascontiguousarray(array)
        code = _array_code(src, dtype, what)
        out, work, copy_back = self._out_array(out, (self.size,) + src.shape, src.dtype, what)
        return self._submit_ptr(
            _lib.COLL_ALLGATHER, what, buf=work.ctypes.data, input=src.ctypes.data,
            count=src.size, code=code, keep=(array, src, out, work),
            on_done=_delivered(out, copy_back), name=name, timeout=timeout, wire=wire,
        )

    def _reduce_scatter_req(self, array, op, weight, out, dtype, name, timeout, wire=None):
        what = "reduce_scatter"
        parse_op_weight(op, weight, what)
        src = np.ascontiguousarray(array)
        if src.ndim == 0 or src.shape[0] % self.size:
            raise ValueError(
                f"{what}: the first axis ({src.shape[0] if src.ndim else 'none'}) must split "
                f"into {self.size} equal blocks, one per rank"
            )
        code = _array_code(src, dtype, what)
        shape = (src.shape[0] // self.size,) + src.shape[1:]
        out, work, copy_back = self._out_array(out, shape, src.dtype, what)
        return self._submit_ptr(
            _lib.COLL_REDUCE_SCATTER, what, buf=work.ctypes.data, input=src.ctypes.data,
            count=work.size, code=code, op=op, weight=weight, keep=(array, src, out, work),
            on_done=_delivered(out, copy_back), name=name, timeout=timeout, wire=wire,
        )

    # ---- collectives ----

    def allreduce(
        self, array, op="sum", *, weight=None, dtype=None, name=None, timeout=None, wire_dtype=None
    ):
        """Reduces array across all ranks, in place, and returns it.

        op: "sum", "mean" (float types), "min", "max", "prod", or "wmean" with
        weight= this rank's weight (float types): sum(w_i x_i) / sum(w_i).
        dtype="bfloat16" reduces a uint16 array of bfloat16 bit patterns.
        wire_dtype: how a float32 array travels between hosts: "bfloat16" or
        "float16" (half the bytes, rounded at each hop; ringd.h, ringd_wire),
        "none" (exact), or None for the daemon's wire_dtype."""
        return self._allreduce_req(
            array, op, weight, dtype, name, timeout, wire=wire_dtype
        ).wait()

    def allreduce_async(
        self, array, op="sum", *, weight=None, dtype=None, name=None, timeout=None, wire_dtype=None
    ):
        """allreduce() without waiting: returns a Request whose wait() gives array."""
        return self._allreduce_req(
            array, op, weight, dtype, name, timeout, "allreduce_async", wire=wire_dtype
        )

    def broadcast(self, array, root=0, *, dtype=None, name=None, timeout=None):
        """Overwrites array with the root rank's array, in place, and returns it."""
        return self._broadcast_req(array, root, dtype, name, timeout).wait()

    def broadcast_async(self, array, root=0, *, dtype=None, name=None, timeout=None):
        return self._broadcast_req(array, root, dtype, name, timeout, "broadcast_async")

    def allgather(self, array, *, out=None, dtype=None, name=None, timeout=None, wire_dtype=None):
        """Every rank's array, stacked along a new first axis in rank order:
        a new array of shape (size,) + array.shape, or out. wire_dtype: as
        for allreduce()."""
        return self._allgather_req(array, out, dtype, name, timeout, wire=wire_dtype).wait()

    def allgather_async(
        self, array, *, out=None, dtype=None, name=None, timeout=None, wire_dtype=None
    ):
        return self._allgather_req(
            array, out, dtype, name, timeout, "allgather_async", wire=wire_dtype
        )

    def reduce_scatter(
        self, array, op="sum", *, weight=None, out=None, dtype=None, name=None, timeout=None,
        wire_dtype=None,
    ):
        """Splits array along its first axis into size equal blocks and returns
        block `rank` of the reduction over all ranks: shape
        (array.shape[0] // size,) + array.shape[1:]. wire_dtype: as for
        allreduce()."""
        return self._reduce_scatter_req(
            array, op, weight, out, dtype, name, timeout, wire=wire_dtype
        ).wait()

    def reduce_scatter_async(
        self, array, op="sum", *, weight=None, out=None, dtype=None, name=None, timeout=None,
        wire_dtype=None,
    ):
        return self._reduce_scatter_req(
            array, op, weight, out, dtype, name, timeout, wire=wire_dtype
        )

    # ---- composed in libringd (blocking only) ----

    def _composed(self, fn, what, *args):
        """Runs libringd's blocking fn (ringd_gather, ...) on this client."""
        state = self._state
        with state.lock:
            state.check(what)
            state.flush()
            rc = getattr(state.lib.c, fn)(state.ptr, *args)
            if rc < 0:
                state.refresh_place()  # before anybody hears of a ResizedError
                raise state.lib.error(rc, state.ptr)

    def _blocks_of(self, src, what):
        """The shape of one of the size blocks src's first axis splits into."""
        if src.ndim == 0 or src.shape[0] % self.size:
            raise ValueError(
                f"{what}: the first axis ({src.shape[0] if src.ndim else 'none'}) must split "
                f"into {self.size} equal blocks, one per rank"
            )
        return (src.shape[0] // self.size,) + src.shape[1:]

    def gather(self, array, root=0, *, out=None, dtype=None):
        """Every rank's array, stacked along a new first axis in rank order, on
        the root: a new array of shape (size,) + array.shape, or out; None on
        the other ranks (which pass no out). An allgather into a staging
        buffer of libringd (ringd.h, ringd_gather). Blocking only."""
        what = "gather"
        src = np.ascontiguousarray(array)
        code = _array_code(src, dtype, what)
        work = copy_back = None
        if self.rank == int(root):
            out, work, copy_back = self._out_array(out, (self.size,) + src.shape, src.dtype, what)
        elif out is not None:
            raise ValueError(f"{what}: only the root, rank {root}, passes out=")
        self._composed(
            "ringd_gather", what, src.ctypes.data, None if work is None else work.ctypes.data,
            src.size, code, int(root),
        )
        if copy_back:
            copy_back()
        return out

    def scatter(self, array, root=0, *, out=None, shape=None, dtype=None):
        """Block `rank` of the root's array, split along its first axis into
        size equal blocks: a new array of shape (array.shape[0] // size,) +
        array.shape[1:], or out. The other ranks pass None for array and say
        what they get: out=, or shape= and dtype= (default float32; dtype
        "bfloat16" gives uint16 bit patterns). A broadcast of the root's
        whole array (ringd.h, ringd_scatter). Blocking only."""
        what = "scatter"
        if self.rank == int(root):
            if array is None:
                raise ValueError(f"{what}: the root, rank {root}, passes the array to scatter")
            src = np.ascontiguousarray(array)
            code = _array_code(src, dtype, what)
            block, npdt = self._blocks_of(src, what), src.dtype
        else:
            if array is not None:
                raise ValueError(f"{what}: only the root, rank {root}, passes an array")
            src = None
            if out is not None:
                if not isinstance(out, np.ndarray):
                    raise TypeError(
                        f"{what}: out must be a numpy.ndarray, got {type(out).__name__}"
                    )
                block, npdt = out.shape, out.dtype
                code = _array_code(out, dtype, what)
            elif shape is not None:
                block = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
                npdt = numpy_dtype(np.float32 if dtype is None else dtype)
                code = dtype_code(np.float32 if dtype is None else dtype)
            else:
                raise ValueError(
                    f"{what}: rank {self.rank} is not the root: pass out= or shape= "
                    "(and dtype=) for the block it gets"
                )
        out, work, copy_back = self._out_array(out, block, npdt, what)
        self._composed(
            "ringd_scatter", what, None if src is None else src.ctypes.data, work.ctypes.data,
            work.size, code, int(root),
        )
        if copy_back:
            copy_back()
        return out

    def alltoall(self, array, *, out=None, dtype=None):
        """Splits array along its first axis into size equal blocks, block j
        for rank j, and returns what every rank sent this one: an array of
        array's shape (or out) whose block i is block `rank` of rank i's
        array. An allgather of every rank's whole array: size times the
        memory and about twice the traffic of a true all-to-all (ringd.h,
        ringd_alltoall). Blocking only."""
        what = "alltoall"
        src = np.ascontiguousarray(array)
        code = _array_code(src, dtype, what)
        block = self._blocks_of(src, what)
        out, work, copy_back = self._out_array(out, src.shape, src.dtype, what)
        self._composed(
            "ringd_alltoall", what, src.ctypes.data, work.ctypes.data,
            int(np.prod(block, dtype=np.int64)), code,
        )
        if copy_back:
            copy_back()
        return out

    def barrier(self, *, name=None, timeout=None):
        """Returns once every rank has entered the barrier."""
        self.barrier_async(name=name, timeout=timeout).wait()

    def barrier_async(self, *, name=None, timeout=None):
        return self._submit_ptr(_lib.COLL_BARRIER, "barrier", name=name, timeout=timeout)


def connect(path=None):
    """The process's connection to its host's ringd daemon: made on the
    first call, which joins the ring's ranks, and returned by the next ones.

    path: the daemon's Unix socket; None means $RINGD_SOCKET, else
    /run/ringd/ringd.sock (or whatever the open connection uses). A process
    is one rank: with a connection open, asking for another socket raises
    RingError(EBUSY) naming both; close() it first. The local rank is
    $RINGD_LOCAL_RANK, else $LOCAL_RANK, else chosen by the daemon. Also a
    context manager, which closes the connection at the end:

        with ringd.connect() as c:
            c.allreduce(grad, op="mean")
    """
    global _shared
    with _shared_lock:
        current = _shared_connection()
        if current is not None:
            if path is None or _same_socket(path, current.path):
                return current
            raise _one_rank_only(current, path, f"ringd.connect({os.fspath(path)!r})")
        conn = Connection.__new__(Connection)
        conn._open(path)
        _shared = conn
        return conn


_shared = None  # the process's Connection, once made
_shared_lock = threading.Lock()


def _shared_connection():
    """The process's open connection, or None (lock held). One inherited
    through fork() is the parent's, not this process's."""
    c = _shared
    if c is None or c.closed or c._state.pid != os.getpid():
        return None
    return c


def _same_socket(a, b):
    return os.path.realpath(os.fspath(a)) == os.path.realpath(os.fspath(b))


def _one_rank_only(current, path, what):
    where = "the same socket" if path is None else os.fspath(path)
    return make_error(
        _lib.EBUSY,
        f"{what}: this process is already rank {current.rank} of {current.size} through "
        f"{current.path}, and a process can be one rank only (asked for {where}); use that "
        "connection (ringd.connect() and ringd.default_connection() return it) or close() "
        "it first",
    )


def default_connection():
    """The process's connection (ringd.torch and its torch.distributed
    backend use it when not given one): connect() with no path."""
    return connect()


def init(path=None):
    """connect(path), for the Horovod habit of calling init() first; may be
    called again (it returns the same connection)."""
    return connect(path)
