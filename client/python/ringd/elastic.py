"""Training that goes on when the ring shrinks or grows.

An elastic ring drops a host that is gone for evict_after, takes it back
when it returns, and lets one leave at once (ringctl leave). The collective
in flight then fails on every rank with ringd.ResizedError, and the next one
runs on the new ring, with new ranks. What is lost is the step in progress:
each rank goes back to its last commit, and the ranks agree on one state
before they go on, the state of the rank that has been in the ring longest,
so that a host that comes back (a fresh process) catches up.

    import ringd, ringd.elastic, ringd.torch

    conn = ringd.connect()
    state = ringd.elastic.State(model=model, optimizer=opt, step=0)

    @ringd.elastic.run
    def train(state):
        while state.step < STEPS:
            opt.zero_grad()
            loss = model(batch(state.step, conn.rank, conn.size)).sum()
            loss.backward()
            for p in model.parameters():
                ringd.torch.allreduce_(p.grad, conn=conn)   # may raise ResizedError
            opt.step()
            state.step += 1
            state.commit()           # what a resize goes back to
        return loss

    train(state)

conn.rank and conn.size are read again in every step: they change with the
ring.

State holds the model and the optimizer (anything with state_dict() and
load_state_dict(), such as PyTorch modules and optimizers; optional) and
any other attributes set on it (keyword arguments, or later: state.epoch =
3): NumPy arrays, numbers, lists, dicts, ... commit() copies them all in
memory, restore() goes back to that copy, and sync(conn) makes every rank's
state the committed state of the rank in the ring longest.

The state travels between ranks with pickle: a rank unpickles what another
rank of the same ring sent, which it trusts as much as the gradients it
reduces with it. PyTorch is never imported here; its objects are handled
through their own methods.
"""

import copy
import functools
import pickle
import time

import numpy as np

from ._lib import ResizedError, RingError

# Bytes per broadcast of a serialized state: well under the smallest
# max_buffer a daemon accepts (1 MiB).
CHUNK = 512 * 1024

# A State that has never synced: newer than any membership epoch.
_NEVER = np.iinfo(np.int64).max

_OWN = ("model", "optimizer")  # attributes that are not user values

# Failures every rank gets alike for the same collective, which the ring
# recovers from by itself: the ring broke (a host went away, before it is
# closed over), a rank left, a collective timed out (the ring was down).
_TRANSIENT = frozenset(("RINGD_ERING", "RINGD_EABORTED", "RINGD_ETIMEDOUT"))


def _copy_model(model):
    """A copy of model's state_dict() that later training leaves alone."""
    out = model.state_dict()
    return type(out)((k, _clone(v)) for k, v in out.items())


def _clone(v):
    # A tensor's detach().clone() copies its data without its graph.
    if hasattr(v, "detach") and hasattr(v, "clone"):
        return v.detach().clone()
    return copy.deepcopy(v)


def _copy_value(v):
    return v.copy() if isinstance(v, np.ndarray) else copy.deepcopy(v)


class State:
    """What a rank must get back after a resize: model, optimizer and user
    values, with an in-memory commit of them.

    State(model=None, optimizer=None, **values): values become attributes
    (state.step, ...); every public attribute set later is a value too.
    The State is committed once when made, so restore() and sync() always
    have a commit to go back to.
    """

    def __init__(self, model=None, optimizer=None, **values):
        for what, obj in (("model", model), ("optimizer", optimizer)):
            if obj is not None and not (
                hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")
            ):
                raise TypeError(
                    f"State: {what} must have state_dict() and load_state_dict() (a PyTorch "
                    f"module or optimizer), got {type(obj).__name__}; pass other objects as "
                    "keyword values"
                )
        self.model = model
        self.optimizer = optimizer
        for name, value in values.items():
            if name.startswith("_") or name in _OWN or name in ("resizes", "joined"):
                raise ValueError(f"State: {name!r} cannot be a value's name")
            setattr(self, name, value)
        self._committed = None
        # The membership epoch of this State's first successful sync: the
        # smaller, the longer it has been in the ring (see sync()).
        self._joined = None
        self._resizes = 0
        self._commits = 0  # commit() calls: how run() tells training goes on
        self.commit()

    def __repr__(self):
        names = ", ".join(f"{k}={v!r}" for k, v in self._values().items())
        return f"<ringd.elastic.State {names}>"

    def _values(self):
        return {k: v for k, v in vars(self).items() if not k.startswith("_") and k not in _OWN}

    @property
    def resizes(self):
        """How many ResizedErrors run() has seen with this State (not part of
        the state: restore() leaves it)."""
        return self._resizes

    @property
    def joined(self):
        """The membership epoch in which this State first synced with the
        ring, None before its first sync()."""
        return self._joined

    # ---- in memory ----

    def _snapshot(self):
        return {
            "values": {k: _copy_value(v) for k, v in self._values().items()},
            "model": None if self.model is None else _copy_model(self.model),
            "optimizer": None
            if self.optimizer is None
            else copy.deepcopy(self.optimizer.state_dict()),
        }

    def commit(self):
        """Copies the model's and the optimizer's state_dicts and every value,
        in memory: what restore() and sync() go back to. Call it where every
        rank is at the same point of training (after a step, say)."""
        self._committed = self._snapshot()
        self._commits += 1

    def restore(self):
        """Goes back to the last commit: the model and the optimizer load
        their committed state_dicts, the values are set back (NumPy arrays
        in place when their shape and dtype allow, so that views of them,
        and arrays from Connection.empty(), stay valid); values set after
        the commit are removed. The commit itself stays as it was."""
        snap = self._committed
        values = snap["values"]
        for name in list(self._values()):
            if name not in values:
                delattr(self, name)
        for name, saved in values.items():
            cur = getattr(self, name, None)
            if (
                isinstance(cur, np.ndarray)
                and isinstance(saved, np.ndarray)
                and cur.shape == saved.shape
                and cur.dtype == saved.dtype
                and cur.flags.writeable
            ):
                cur[...] = saved
            else:
                setattr(self, name, _copy_value(saved))
        # load_state_dict() may keep references to what it is given: give it
        # copies, so that training does not change the commit.
        if self.model is not None and snap["model"] is not None:
            self.model.load_state_dict(_copy_model_dict(snap["model"]))
        if self.optimizer is not None and snap["optimizer"] is not None:
            self.optimizer.load_state_dict(copy.deepcopy(snap["optimizer"]))

    # ---- across the ring ----

    def sync(self, conn):
        """Makes every rank's state the committed state of the rank that has
        been in the ring longest, and restores it on every rank. Every rank
        of conn's ring must call it at the same point (run() does, after
        each resize and at the start).

        Each rank gives the membership epoch of its first sync (a State that
        never synced counts as newest) and its rank, in one allgather; the
        smallest pair wins, so a rank that has just joined catches up, and
        ranks that joined together (and so hold the same state) pick the
        lowest rank. Then that rank broadcasts its serialized commit, its
        length first, then its bytes as uint8 in chunks of CHUNK. Raises
        ResizedError if the ring changes meanwhile (run() syncs again).
        Returns the rank whose state was taken."""
        epoch = _membership_epoch(conn)
        mine = np.array([_NEVER if self._joined is None else self._joined, conn.rank], np.int64)
        everyone = np.asarray(conn.allgather(mine, name="elastic: who leads"))
        root = int(min(range(len(everyone)), key=lambda r: (int(everyone[r, 0]), r)))
        if conn.rank == root:
            data = np.frombuffer(pickle.dumps(self._committed, protocol=4), np.uint8)
            length = np.array([data.size], np.int64)
        else:
            data = None
            length = np.zeros(1, np.int64)
        conn.broadcast(length, root, name="elastic: state length")
        n = int(length[0])
        buf = np.empty(n, np.uint8) if data is None else data.copy()
        for off in range(0, n, CHUNK):
            conn.broadcast(buf[off : off + CHUNK], root, name="elastic: state")
        if conn.rank != root:
            self._committed = pickle.loads(buf.tobytes())
        self.restore()
        if self._joined is None:
            self._joined = epoch
        return root


def _copy_model_dict(sd):
    return type(sd)((k, _clone(v)) for k, v in sd.items())


def _membership_epoch(conn):
    """The membership epoch of conn's ring: 0 from a daemon that does not
    report one (and from a connection without membership())."""
    membership = getattr(conn, "membership", None)
    return int(membership()["epoch"]) if membership is not None else 0


def run(train_fn=None, *, conn=None, max_resizes=None, on_resize=None, retry_for=600.0,
        on_error=None):
    """Wraps train_fn(state, *args, **kwargs) so that it survives resizes:
    the function returned syncs the state (State.sync) and calls train_fn;
    whenever train_fn, or the sync, raises ringd.ResizedError it syncs again
    (which restores the state of the rank in the ring longest on every rank)
    and calls train_fn again, until train_fn returns; it returns what
    train_fn returns.

    The failures that come before a resize, or without one, are taken the
    same way: RINGD_ERING (the ring broke: a host went away and is not
    closed over yet), RINGD_EABORTED (a rank left) and RINGD_ETIMEDOUT.
    Every rank gets the same one for the same collective, so every rank
    goes back to its last commit and syncs; they are retried, a moment
    apart, for up to retry_for seconds without a commit in between, then
    the last one is raised. Any other exception goes to the caller.

    conn: the Connection (default: ringd.connect(), the process's own).
    max_resizes: after so many ResizedErrors in one call, the last one is
    raised (default: no limit). on_resize(state, error): called after each,
    before the sync (to log it, say); on_error(state, error) the same for
    the other failures retried. state.resizes counts the resizes. A
    decorator too, with or without arguments:

        @ringd.elastic.run
        def train(state): ...

        @ringd.elastic.run(on_resize=lambda s, e: print(e))
        def train(state): ...
    """
    if train_fn is None:
        return functools.partial(run, conn=conn, max_resizes=max_resizes, on_resize=on_resize,
                                 retry_for=retry_for, on_error=on_error)

    @functools.wraps(train_fn)
    def elastic(state, *args, **kwargs):
        c = conn
        if c is None:
            from ._core import connect

            c = connect()
        seen = 0
        failing_since, commits = None, None
        while True:
            try:
                state.sync(c)
                return train_fn(state, *args, **kwargs)
            except ResizedError as e:
                seen += 1
                state._resizes += 1
                if max_resizes is not None and seen > max_resizes:
                    raise
                if on_resize is not None:
                    on_resize(state, e)
            except RingError as e:
                if e.name not in _TRANSIENT:
                    raise
                now = time.monotonic()
                if commits != state._commits:  # it trained since the last one
                    failing_since, commits = now, state._commits
                if now - failing_since > retry_for:
                    raise
                if on_error is not None:
                    on_error(state, e)
                time.sleep(0.1)

    return elastic
