"""Checkpoints that every rank agrees are complete, and a resume that
continues bit for bit.

    import ringd.checkpoint as ckpt

    loader = ckpt.ResumableLoader(torch.utils.data.DataLoader(data, shuffle=True, ...))
    state = ckpt.load(DIR)                   # the newest step complete on every host, or None
    step = ckpt.restore(state, model=model, optimizer=opt, loader=loader)["step"] if state else 0
    while step < STEPS:
        for x, y in loader:
            ...                              # forward, backward, opt.step()
            step += 1
            if step % 100 == 0:
                ckpt.save(DIR, step, ckpt.capture(model=model, optimizer=opt, loader=loader,
                                                  progress={"step": step}))

save() is a collective, like latest() and load(): every rank calls it with
the same step. Each rank writes its own part (rank-NNNNN.ckpt: whatever state
it is given) to a temporary name, fsyncs it, renames it into place and fsyncs
the directory. Then the ranks agree, over the ring, that every part of the
step is on disk; only then does each host (its local rank 0) write the
step's manifest, listing the size and SHA-256 of each part it holds, the
same durable way, last. A step is complete on a host when its manifest is
there and every file matches it. If any rank fails to write, or dies, no host
commits the step and every rank that is left raises the same RingError
naming the rank and the reason. keep= prunes the older steps; background=True
writes in a thread and agrees at the next save() or wait().

DIR may be one directory per host (nothing shared) or one shared by every
host: parts are named by rank and manifests by the ranks of their host, so
no two hosts write the same file (see ringd._ckpt_files for the layout).

latest() has each rank check its own part of each step against its host's
manifest (size and SHA-256), newest first, and the ranks agree on the newest
step that is complete everywhere: a partial or damaged step is skipped, with
one warning (CheckpointWarning) on the rank that found it, naming the file.

Parts are not pickles: loading one runs no code, and the same state gives
the same bytes (ringd._ckpt_format). A state is made of None, bool, int,
float, complex, str, bytes, lists, tuples, dicts, NumPy arrays and scalars,
and torch tensors; torch is only imported for a state that holds tensors.

capture() and restore() gather and put back what a bit-identical resume
needs: the model's and optimizer's state dicts, the random states of
Python, NumPy and torch (and of any generators named), the position of a
ResumableLoader in its epoch, and a progress dict of your own.

The collectives, save(), latest(), load() and wait(), take conn= (a
ringd.Connection; default the process's shared one,
ringd.default_connection()); the first three also take timeout= (seconds
that the ranks wait for each other in each agreement; default the daemon's
collective_timeout: raise it if writing a part can take longer).
"""

import atexit
import os
import random
import socket
import struct
import sys
import threading
import warnings
import weakref

import numpy as np

from . import EINVAL, EIO, RingError, default_connection
from . import _ckpt_files as files
from . import _ckpt_format as fmt

__all__ = [
    "CheckpointWarning",
    "PendingSave",
    "ResumableLoader",
    "capture",
    "latest",
    "load",
    "restore",
    "rng_state",
    "save",
    "set_rng_state",
    "wait",
]

# Test hooks: "write" -> fn(temporary path), called halfway through writing
# a part (tests pause a rank there, or make it fail).
_HOOKS = {}


class CheckpointWarning(UserWarning):
    """A step that is partial or damaged on this host, skipped."""


def _error(code, message):
    """A RingError of code, named as the package names it (ringd.EIO is
    RINGD_EIO); looked up when needed, the package being whole by then."""
    import ringd

    names = [n for n in dir(ringd) if n[:1] == "E" and n.isupper() and getattr(ringd, n) == code]
    return RingError(code, f"RINGD_{names[0]}" if names else f"RINGD_E?({code})", message)


def _conn(conn):
    return conn if conn is not None else default_connection()


def _host(conn):
    """The ranks of conn's host, first and last: ranks are numbered host by
    host, so they follow from the local rank without asking anyone."""
    first = conn.rank - conn.local_rank
    return first, first + conn.local_size - 1


def _check_step(step):
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
        raise ValueError(f"step must be an int >= 0, got {step!r}")
    return int(step)


# ---- agreement ----------------------------------------------------------------

# What each rank tells every other in an agreement, as a fixed-size record
# (allgather): whether its share worked, and if not why; for save, the size
# and SHA-256 of its part, which its host's manifest lists.
_RECORD = struct.Struct("<iiqq32s456s")  # 512 bytes: room for a path in the reason
_REASON_BYTES = 456


class _Status:
    def __init__(self, rank, step, code=0, reason="", size=0, sha=""):
        self.rank, self.step, self.code = rank, step, code
        self.reason, self.size, self.sha = reason, size, sha

    @classmethod
    def failed(cls, rank, step, exc):
        """The status of a rank whose share raised exc: RINGD_EIO for files
        that cannot be written or read or are damaged, RINGD_EINVAL for a
        state that cannot be saved (say, a value of an unknown type)."""
        if isinstance(exc, RingError):
            code, reason = exc.code, exc.message
        elif isinstance(exc, (OSError, ValueError)):
            code, reason = EIO, str(exc)
        else:
            code, reason = EINVAL, f"{type(exc).__name__}: {exc}"
        return cls(rank, step, code, reason)

    def pack(self):
        reason = self.reason.encode("utf-8")[:_REASON_BYTES]
        sha = bytes.fromhex(self.sha) if self.sha else bytes(32)
        return _RECORD.pack(self.code, self.rank, self.step, self.size, sha, reason)

    @classmethod
    def unpack(cls, raw):
        code, rank, step, size, sha, reason = _RECORD.unpack(raw)
        reason = reason.rstrip(b"\0").decode("utf-8", "ignore")
        return cls(rank, step, code, reason, size, sha.hex())


def _agree(conn, mine, name, what, timeout):
    """Every rank's _Status, the same list on every rank. If any rank
    failed, or the ranks are at different steps, every rank raises the same
    RingError: what, then each failing rank and its reason. If the
    collective itself fails (a rank died), its error, prefixed by what."""
    raw = np.frombuffer(mine.pack(), np.uint8)
    try:
        rows = conn.allgather(raw, name=name, timeout=timeout)
    except RingError as e:
        raise RingError(e.code, e.name, f"{what}: {e.message}") from None
    everyone = [_Status.unpack(rows[r].tobytes()) for r in range(rows.shape[0])]
    steps = sorted({s.step for s in everyone})
    if len(steps) > 1:
        at = ", ".join(f"rank {s.rank} step {s.step}" for s in everyone)
        raise _error(EINVAL, f"{what}: the ranks are at different steps ({at})")
    bad = [s for s in everyone if s.code]
    if bad:
        why = "; ".join(f"rank {s.rank} failed: {s.reason}" for s in bad)
        raise _error(bad[0].code, f"{what}: {why}")
    return everyone


# ---- save ---------------------------------------------------------------------


def _write_part(directory, step, rank, host, head, blobs):
    """Writes rank's part of step durably; its _Status. The host's local
    rank 0 first clears the way (_clear_after)."""
    if rank == host[0]:
        _clear_after(directory, step, *host)
    size, sha = files.write_atomic(files.step_dir(directory, step), files.part_name(rank),
                                   fmt.chunks(head, blobs), _HOOKS.get("write"))
    return _Status(rank, step, size=size, sha=sha)


def _clear_after(directory, step, first, last):
    """Before a save of step, this host's share of it (a manifest of an
    earlier save of the same step) is un-committed: the step is being
    written again. The host's shares of the steps after it, from a run that
    went further and was abandoned, go: left there, latest() could take
    them for newer than this one. No rank is writing any of these now: none
    can be past this step's agreement."""
    files.remove_manifest(directory, step, first, last)
    for s in files.steps_in(directory):
        if s > step:
            files.remove_host_step(directory, s, first, last)


def _commit(conn, directory, step, keep, mine, timeout):
    """The agreement of a save, then the manifests, then pruning."""
    what = f"checkpoint step {step} not saved"
    everyone = _agree(conn, mine, f"ckpt save {step} parts", what, timeout)
    first, last = _host(conn)
    commit = _Status(conn.rank, step)
    written = False
    if conn.local_rank == 0:
        try:
            m = files.Manifest(step, conn.size, first, last, socket.gethostname(),
                               [(files.part_name(s.rank), s.rank, s.size, s.sha)
                                for s in everyone[first : last + 1]])
            files.write_atomic(files.step_dir(directory, step), m.name,
                               [m.text().encode("utf-8")])
            written = True
        except Exception as e:  # noqa: BLE001 - every rank must hear of it
            commit = _Status.failed(conn.rank, step, e)
    try:
        _agree(conn, commit, f"ckpt save {step} commit", what, timeout)
    except BaseException:
        # Some host could not commit: the step is not complete anywhere.
        if written:
            files.remove_manifest(directory, step, first, last)
        raise
    if conn.local_rank == 0:
        _prune(directory, step, keep, first, last)
    return step


def _prune(directory, step, keep, first, last):
    """This host's share of the steps before step, just committed: the
    keep - 1 newest complete ones stay (keep None: all of them), the rest,
    complete or partial, go. (Ranks already saving the next step write
    nothing here.)"""
    if keep is None:
        return
    kept = 1
    for s in files.steps_in(directory):
        if s >= step:
            continue
        complete = os.path.exists(
            os.path.join(files.step_dir(directory, s), files.manifest_name(first, last))
        )
        if complete and kept < keep:
            kept += 1
            continue
        try:
            files.remove_host_step(directory, s, first, last)
        except OSError as e:
            warnings.warn(f"ringd.checkpoint: could not remove step {s}: {e}",
                          CheckpointWarning, stacklevel=4)


class PendingSave:
    """A save(background=True): its part is being written by a thread. wait()
    (or the next save(), latest(), load() or ringd.checkpoint.wait() on the
    same connection) joins the thread, then makes the agreement and the
    commit: a collective, so every rank must reach it."""

    def __init__(self, conn, directory, step, keep, timeout, encoded):
        self.conn, self.directory, self.step = conn, directory, step
        self._keep, self._timeout = keep, timeout
        self._status = None
        self._result = None  # the step, or the RingError, once waited for
        self._thread = None
        if isinstance(encoded, BaseException):
            self._status = _Status.failed(conn.rank, step, encoded)
            return
        self._thread = threading.Thread(
            target=self._write, args=(_host(conn), *encoded[:2]), name=f"ringd-ckpt-{step}",
            daemon=True,
        )
        self._thread.start()

    def _write(self, host, head, blobs):
        try:
            self._status = _write_part(self.directory, self.step, self.conn.rank, host, head,
                                       blobs)
        except BaseException as e:  # noqa: BLE001 - reported at wait()
            self._status = _Status.failed(self.conn.rank, self.step, e)

    def written(self):
        """True once this rank's part is written (or failed); not yet agreed."""
        return self._thread is None or not self._thread.is_alive()

    def wait(self):
        """Waits for the write, agrees with the other ranks and commits;
        returns the step, or raises the RingError every rank gets."""
        if self._result is None:
            if _pending.get(self.conn) is self:
                del _pending[self.conn]
            if self._thread is not None:
                self._thread.join()
            try:
                self._result = _commit(self.conn, self.directory, self.step, self._keep,
                                       self._status, self._timeout)
            except RingError as e:
                self._result = e
        if isinstance(self._result, RingError):
            raise self._result
        return self._result


_pending = weakref.WeakKeyDictionary()  # Connection -> PendingSave


def _finish(conn):
    """Commits conn's pending background save, if any (raising its error)."""
    p = _pending.get(conn)
    if p is not None:
        p.wait()


def wait(conn=None):
    """Finishes the background save pending on conn (agreement and commit:
    every rank must call it); returns its step, or None if there was none."""
    conn = _conn(conn)
    p = _pending.get(conn)
    return p.wait() if p is not None else None


@atexit.register
def _unfinished():
    for p in list(_pending.values()):
        warnings.warn(f"ringd.checkpoint: the background save of step {p.step} in "
                      f"{p.directory} was never committed: call ringd.checkpoint.wait() "
                      "on every rank before exiting", CheckpointWarning)


def save(directory, step, state, *, conn=None, keep=3, background=False, timeout=None):
    """Saves this rank's state as its part of step in directory; a
    collective, with the same step on every rank.

    Returns once every rank's part is on disk and each host's manifest is
    written (the step is complete everywhere); if any rank failed to write,
    or died, no host commits it and every rank raises the same RingError.
    keep: how many complete steps to keep, the newest ones, counting this
    one (None: all); the steps after this one, from an abandoned run, are
    removed, so that latest() cannot take them for newer than this one.

    background=True copies the state's arrays and tensors at once and
    writes them in a thread; it returns a PendingSave, and the agreement and
    commit happen at its wait(), ringd.checkpoint.wait() or the next save(),
    on every rank (where a failure of any rank is raised, and the new save
    not started)."""
    conn = _conn(conn)
    _finish(conn)
    step = _check_step(step)
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
        raise ValueError(f"keep must be an int >= 1 or None, got {keep!r}")
    directory = os.fspath(directory)
    try:
        encoded = fmt.encode(state, copy=background)
    except Exception as e:  # noqa: BLE001 - the other ranks must hear of it
        encoded = e
    if background:
        p = PendingSave(conn, directory, step, keep, timeout, encoded)
        _pending[conn] = p
        return p
    if isinstance(encoded, BaseException):
        mine = _Status.failed(conn.rank, step, encoded)
    else:
        try:
            mine = _write_part(directory, step, conn.rank, _host(conn), *encoded[:2])
        except Exception as e:  # noqa: BLE001 - the other ranks must hear of it
            mine = _Status.failed(conn.rank, step, e)
    _commit(conn, directory, step, keep, mine, timeout)
    return None


# ---- latest and load ----------------------------------------------------------


def latest(directory, *, conn=None, timeout=None):
    """The newest step complete on every host, agreed by every rank (a
    collective); None if there is none.

    Each rank checks its own part of each step against its host's manifest
    (size and SHA-256), newest first, and proposes the newest that passes;
    the ranks take the lowest proposal and, until they all propose the same
    step, propose again at or below it. A partial or damaged step gets one
    CheckpointWarning on the rank that found it, naming the file."""
    conn = _conn(conn)
    _finish(conn)
    directory = os.fspath(directory)
    first, last = _host(conn)
    steps = files.steps_in(directory)
    found = {}  # step -> None if complete here, else why not

    def newest(bound):
        for s in steps:
            if bound is not None and s > bound:
                continue
            if s not in found:
                try:
                    files.check_part(directory, s, conn.rank, conn.size, first, last)
                    found[s] = None
                except ValueError as e:
                    found[s] = str(e)
                    warnings.warn(f"ringd.checkpoint: step {s} skipped: {e}", CheckpointWarning,
                                  stacklevel=3)
            if found[s] is None:
                return s
        return -1

    bound, rnd = None, 0
    while True:
        v = np.array([newest(bound)] * 2, np.int64)
        v[1] = -v[1]
        try:
            conn.allreduce(v, op="min", name=f"ckpt latest {rnd}", timeout=timeout)
        except RingError as e:
            raise RingError(e.code, e.name, f"checkpoint: no agreement on the latest step: "
                            f"{e.message}") from None
        low, high = int(v[0]), -int(v[1])
        if low == high:
            break
        bound, rnd = low, rnd + 1
    agreed = None if low < 0 else low
    newer = [s for s, why in found.items() if why is None and (agreed is None or s > agreed)]
    if newer:
        warnings.warn(f"ringd.checkpoint: step {max(newer)} is complete on this host but not on "
                      f"every host; the ranks agreed on step {agreed}", CheckpointWarning,
                      stacklevel=2)
    return agreed


def load(directory, step=None, *, conn=None, timeout=None):
    """The state this rank saved at step (default: latest(), the newest step
    complete everywhere), a collective. Returns None when step is None and
    no step is complete everywhere. Each rank checks its part's size and
    SHA-256 against its host's manifest as it reads it; if any rank's
    cannot be loaded, every rank raises the same RingError naming it."""
    conn = _conn(conn)
    if step is None:
        step = latest(directory, conn=conn, timeout=timeout)
        if step is None:
            return None
    else:
        step = _check_step(step)
        _finish(conn)
    directory = os.fspath(directory)
    state, mine = None, _Status(conn.rank, step)
    try:
        entry, data = files.check_part(directory, step, conn.rank, conn.size, *_host(conn),
                                       contents=True)
        state = fmt.decode(data, os.path.join(files.step_dir(directory, step), entry[0]))
    except Exception as e:  # noqa: BLE001 - every rank must hear of it
        mine = _Status.failed(conn.rank, step, e)
    _agree(conn, mine, f"ckpt load {step}", f"checkpoint step {step} not loaded", timeout)
    return state


# ---- random states, and what a resume needs -----------------------------------


def _torch(need=False):
    """torch if the process has imported it (or need: import it)."""
    torch = sys.modules.get("torch")
    if torch is None and need:
        import torch
    return torch


def _generator_state(g):
    torch = _torch()
    if torch is not None and isinstance(g, torch.Generator):
        return g.get_state()
    if isinstance(g, np.random.Generator):
        return g.bit_generator.state
    if isinstance(g, np.random.RandomState):
        return g.get_state()
    if isinstance(g, random.Random):
        return g.getstate()
    raise TypeError(f"cannot capture the state of a {type(g).__name__}: expected a "
                    "torch.Generator, numpy.random.Generator or RandomState, or random.Random")


def _set_generator_state(g, state):
    torch = _torch()
    if torch is not None and isinstance(g, torch.Generator):
        g.set_state(state)
    elif isinstance(g, np.random.Generator):
        g.bit_generator.state = state
    elif isinstance(g, np.random.RandomState):
        g.set_state(state)
    elif isinstance(g, random.Random):
        g.setstate(state)
    else:
        _generator_state(g)  # raises the TypeError


def rng_state(generators=None):
    """The random states of this process: Python's random, NumPy's global
    one, torch's CPU (and initialised CUDA) generators if torch is
    imported, and those of generators (a dict: name -> torch.Generator,
    numpy.random.Generator or RandomState, or random.Random)."""
    out = {"python": random.getstate(), "numpy": np.random.get_state()}
    torch = _torch()
    if torch is not None:
        out["torch"] = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            out["cuda"] = torch.cuda.get_rng_state_all()
    if generators:
        out["generators"] = {name: _generator_state(g) for name, g in generators.items()}
    return out


def set_rng_state(state, generators=None):
    """Puts back random states from rng_state() (generators: the same
    names as when captured; names missing on either side are an error)."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "torch" in state:
        torch = _torch(need=True)
        torch.set_rng_state(state["torch"])
        if "cuda" in state:
            torch.cuda.set_rng_state_all(state["cuda"])
    saved = state.get("generators", {})
    if set(saved) != set(generators or {}):
        raise KeyError(f"generators saved {sorted(saved)}, given {sorted(generators or {})}")
    for name, g in (generators or {}).items():
        _set_generator_state(g, saved[name])


def capture(*, model=None, optimizer=None, loader=None, progress=None, generators=None, **extra):
    """The state of a training process, for save(): the state dicts of
    model and optimizer, the random states (rng_state(generators)), the
    position of loader (a ResumableLoader), progress (a dict of your own:
    step, epoch, ...) and any extra values, each under its keyword."""
    state = {"rng": rng_state(generators)}
    if model is not None:
        state["model"] = model.state_dict()
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    if loader is not None:
        state["loader"] = loader.state_dict()
    if progress is not None:
        state["progress"] = progress
    state.update(extra)
    return state


def restore(state, *, model=None, optimizer=None, loader=None, generators=None):
    """Puts back what capture() took, into model, optimizer, loader and
    generators, and the random states last; returns the progress dict (an
    empty one if none was saved)."""
    for key, obj in (("model", model), ("optimizer", optimizer), ("loader", loader)):
        if obj is not None:
            if key not in state:
                raise KeyError(f"the checkpoint has no {key!r} state")
            obj.load_state_dict(state[key])
    set_rng_state(state["rng"], generators)
    return state.get("progress", {})


class ResumableLoader:
    """A data loader (any re-iterable: a torch DataLoader, say) that a
    checkpoint can resume in the middle of an epoch with the batches the
    epoch would have given, in the same order.

    Each iter() is one epoch. As it starts, the wrapper records the random
    states the loader may draw its order from: Python's, NumPy's, torch's,
    and the loader's own generator (loader.generator, or generator=).
    state_dict() gives them with the count of batches handed out so far in
    the epoch (the one being used counts: save after its step). After
    load_state_dict(), the next iter() sets those states, starts the epoch,
    skips the batches already used, and puts every random state back as it
    found it. Attribute epoch: the epochs begun before the current one."""

    def __init__(self, loader, generator=None):
        self.loader = loader
        self.generator = generator if generator is not None else getattr(loader, "generator",
                                                                          None)
        self.epoch = 0
        self._start = None  # random states as the current epoch began
        self._batches = 0
        self._resume = None

    def __len__(self):
        return len(self.loader)

    def __getattr__(self, name):
        """The wrapped loader's attributes (dataset, batch_size, ...)."""
        if name == "loader":  # not set yet (say, while unpickling)
            raise AttributeError(name)
        return getattr(self.loader, name)

    def _generators(self):
        return {"loader": self.generator} if self.generator is not None else None

    def __iter__(self):
        resume, self._resume = self._resume, None
        if resume is None:
            self._start, skip, found = rng_state(self._generators()), 0, None
        else:
            found = rng_state()
            self._start, skip = resume
            # The loader's generator is left where the skipped batches
            # leave it; the process-wide states go back to what they were.
            set_rng_state(self._start, self._generators())
        self._batches = 0
        it = iter(self.loader)
        try:
            for _ in range(skip):
                next(it)
                self._batches += 1
        except StopIteration:
            it = iter(())
        finally:
            if found is not None:
                set_rng_state(found)
        for batch in it:
            self._batches += 1
            yield batch
        self._start, self._batches = None, 0
        self.epoch += 1

    def state_dict(self):
        return {"epoch": self.epoch, "batches": self._batches, "rng": self._start}

    def load_state_dict(self, state):
        self.epoch = state["epoch"]
        self._batches = 0
        self._resume = (state["rng"], state["batches"]) if state["rng"] is not None else None
