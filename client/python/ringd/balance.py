"""Balanced batches: uneven machines finish their steps together.

In synchronous data parallelism every step waits for the slowest rank, so
one machine at half speed halves the whole job. A Balancer gives each rank
a share of every global batch proportional to its measured speed, so that
all finish their part at about the same time, and the gradients combined by
the weighted mean (op "wmean", weight = the rank's rows) are exactly the
mean gradient of the whole global batch, as with equal shares:

    sum_i n_i * (1/n_i) sum_{rows of i} g  /  sum_i n_i  =  (1/B) sum_{all B rows} g

    import ringd, ringd.balance

    conn = ringd.connect()
    bal = ringd.balance.Balancer(conn, global_batch=256, every=10)
    for step in range(steps):
        lo, hi = bal.slice()                 # this rank's rows of the step's global batch
        grad = mean_gradient(batch[lo:hi])   # the mean over its own rows
        bal.done()                           # compute is over: stops the clock
        conn.allreduce(grad, op="wmean", weight=bal.weight)

slice() returns this rank's rows [lo, hi) of the step's global batch
(ranks in rank order: rank 0 takes the first rows) and starts the rank's
clock; done(), called after the backward pass and before the gradients'
allreduce waits, stops it. Every `every` steps, slice() first has the ranks
agree on new shares: one allgather of each rank's rows and compute time
since the last agreement (integers: rows and nanoseconds), from which every
rank computes the same split with the same operations (split()), so no two
ranks can disagree on it; a digest of each rank's state travels with the
measurements, and a rank whose state differs fails the agreement on every
rank with RingError(EMISMATCH) instead of silently mixing two splits.

A rank's speed is its rows per second of compute. The speeds are smoothed
(smoothing: the weight of the history), a rank never gets less than floor
times its equal share (and never no rows, so that it is still measured),
and no rank's share changes by more than max_change of itself per
agreement. Shares proportional to measured speeds converge to equal compute
times even when a step has a fixed cost besides its rows: the fixed point of
"share proportional to rows per second" is the split where every rank's
time is the same.

ringd.torch.BalancedSampler hands each rank its rows of every global batch
(a DataLoader's batch_sampler), and ringd.torch.DistributedOptimizer(...,
balance=bal) reduces with the right weight and calls done() itself; see
docs/pytorch.md. Each rank tells its daemon the split after each agreement
(Connection.report_split), and `ringctl status` shows it.
"""

import hashlib
import math
import time
import warnings
from collections import deque

import numpy as np

from . import _core, _lib
from ._lib import make_error

SMOOTHING = 0.5
FLOOR = 0.1
MAX_CHANGE = 0.5
# Steps not measured after a (re)start: a first step pays for lazy
# initialisation, and the first collectives of a job wait for every rank.
WARMUP = 1
HISTORY = 256


# ---- the split: pure functions, the same on every rank ----------------------


def equal_split(total, n):
    """total rows over n ranks as equally as integers allow (the first ranks
    take one more)."""
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


def _round_split(total, shares, min_rows):
    """Integer rows for fractional shares summing to 1: largest remainders
    (ties to the lower rank), then at least min_rows each, taken one at a
    time from the rank with the most rows (the lowest of equals)."""
    quotas = [total * s for s in shares]
    rows = [int(math.floor(q)) for q in quotas]
    left = total - sum(rows)
    order = sorted(range(len(rows)), key=lambda i: (-(quotas[i] - rows[i]), i))
    for i in order[: max(0, left)]:
        rows[i] += 1
    for i in range(len(rows)):
        while rows[i] < min_rows:
            j = max(range(len(rows)), key=lambda k: (rows[k], -k))
            rows[j] -= 1
            rows[i] += 1
    return rows


def _floored(rates, low):
    """Shares proportional to rates, none below low: the ranks that would
    fall under it get low, the others share the rest in proportion."""
    n = len(rates)
    fixed = [False] * n
    while True:
        free = [i for i in range(n) if not fixed[i]]
        rest = 1.0 - low * (n - len(free))
        total = sum(rates[i] for i in free)
        shares = [low if fixed[i] else rest * rates[i] / total for i in range(n)]
        under = [i for i in free if shares[i] < low]
        if not under:
            return shares
        for i in under:
            fixed[i] = True


def split(rows, rates, measured, *, smoothing=SMOOTHING, floor=FLOOR, max_change=MAX_CHANGE):
    """The next split, from the current one and what was measured since.

    rows: each rank's rows per step now (summing to the global batch);
    rates: each rank's smoothed speed so far, rows per second (0: none yet);
    measured: each rank's (rows, nanoseconds) of compute since the last
    split. Returns (rows, rates), new lists. A rank with nothing measured
    keeps its rate; while a rank has no rate at all, the split stays.

    Only integers come in from the other ranks, and every rank applies the
    same IEEE-754 operations to the same values in the same order, so every
    rank gets the same result, bit for bit."""
    n = len(rows)
    total = sum(rows)
    new_rates = list(rates)
    for i, (r, ns) in enumerate(measured):
        if r > 0 and ns > 0:
            speed = r * 1e9 / ns
            old = rates[i]
            new_rates[i] = speed if old <= 0 else smoothing * old + (1 - smoothing) * speed
    if any(r <= 0 for r in new_rates):
        return list(rows), new_rates
    low = floor / n
    target = _floored(new_rates, low)
    now = [r / total for r in rows]
    # Towards the target along a straight line, as far as max_change lets
    # every rank go: the shares still sum to 1, and stay above the floor.
    step = 1.0
    for a, b in zip(now, target):
        if abs(b - a) > max_change * a:
            step = min(step, max_change * a / abs(b - a))
    shares = [a + step * (b - a) for a, b in zip(now, target)]
    min_rows = max(1, int(low * total))
    return _round_split(total, shares, min_rows), new_rates


def _digest(*parts):
    """A signed 64-bit digest of the state every rank must share."""
    text = repr(parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little", signed=True)


# ---- the Balancer ----------------------------------------------------------------


class Balancer:
    """Splits every global batch of global_batch rows between the ranks in
    proportion to their measured speeds, re-agreed every `every` steps
    (every=0: equal shares for good, for comparison).

    slice() -> (lo, hi): this rank's rows of the step, and starts its clock;
    done(): stops it (after backward, before waiting for the allreduce).
    weight: hi - lo, the weight of this rank's gradient in a "wmean"
    allreduce. rows: every rank's rows per step; rates: their smoothed
    speeds in rows/s (0 until measured); history: (step, rows) of each
    split, the newest last.

    conn: a ringd.Connection (None: the process's). smoothing (0..1): the
    weight of the past in the speeds; floor: no rank gets less than this
    fraction of its equal share (nor less than 1 row); max_change: no share
    changes by more than this fraction of itself per agreement. report:
    tell the daemon each split (ringctl status). timeout: of the
    agreement's allgather (default the daemon's collective_timeout).
    clock: what a step's compute time is read from, in nanoseconds
    (default time.perf_counter_ns; e.g. a device's own timer).
    Every rank must create its Balancer with the same arguments and call
    slice() and done() once per step."""

    def __init__(self, conn, global_batch, every=10, *, smoothing=SMOOTHING, floor=FLOOR,
                 max_change=MAX_CHANGE, report=True, timeout=None,
                 clock=time.perf_counter_ns):
        self.conn = conn if conn is not None else _core.default_connection()
        self.global_batch = int(global_batch)
        self.every = int(every)
        if self.every < 0:
            raise ValueError(f"Balancer: every must be >= 0 (0: equal shares), got {every}")
        if not 0 <= smoothing < 1:
            raise ValueError(f"Balancer: smoothing must be in [0, 1), got {smoothing}")
        if not 0 <= floor <= 1:
            raise ValueError(f"Balancer: floor must be in [0, 1], got {floor}")
        if not max_change > 0:
            raise ValueError(f"Balancer: max_change must be > 0, got {max_change}")
        self.smoothing = float(smoothing)
        self.floor = float(floor)
        self.max_change = float(max_change)
        self.report = bool(report)
        self.timeout = timeout
        self.clock = clock
        self.steps = 0  # steps done() on this Balancer
        self.resplits = 0
        self.history = deque(maxlen=HISTORY)
        self._t0 = None  # clock() at the open step's slice()
        self._lo = self._hi = 0
        self._reset()

    def _reset(self):
        """Equal shares for the connection's ranks, nothing measured: at the
        start, and after the ring's membership changed."""
        self.size = self.conn.size
        if self.global_batch < self.size:
            raise ValueError(
                f"Balancer: a global batch of {self.global_batch} rows cannot give each of "
                f"{self.size} ranks a row"
            )
        self.rows = equal_split(self.global_batch, self.size)
        self.rates = [0.0] * self.size
        self._since = 0  # steps since the last agreement
        self._warmup = WARMUP
        self._measured = [0, 0]  # rows, nanoseconds since the last agreement
        self._reported = False
        self.history.append((self.steps, tuple(self.rows)))

    # ---- a step ----

    @property
    def weight(self):
        """This rank's rows of the current (or last) step: its gradient's
        weight in the "wmean" allreduce."""
        return self._hi - self._lo

    @property
    def open(self):
        """Whether a step has been sliced and not yet done()."""
        return self._t0 is not None

    def slice(self):
        """This rank's rows (lo, hi) of the next step's global batch, and
        starts the rank's clock. Every `every` steps it first agrees on new
        shares with the other ranks (a collective: every rank calls slice()
        at the same step)."""
        if self._t0 is not None:
            raise RuntimeError(
                "Balancer.slice() again before done(): each step is one slice() and one "
                "done() (a DataLoader over a BalancedSampler must have num_workers=0, "
                "or it asks for batches ahead of the steps)"
            )
        if self.conn.size != self.size:
            self._reset()  # the ring was resized: start again from equal shares
        if self.every and self._since >= self.every:
            self._agree()
        if self.report and not self._reported:
            self._tell_daemon()
        rank = self.conn.rank
        self._lo = sum(self.rows[:rank])
        self._hi = self._lo + self.rows[rank]
        self._t0 = self.clock()
        return self._lo, self._hi

    def done(self):
        """Stops the clock of the step that slice() started, and returns the
        step's weight. Calling it again in the same step does nothing."""
        if self._t0 is None:
            if self.steps == 0 and not self._hi:
                raise RuntimeError("Balancer.done() before any slice()")
            return self.weight
        ns = self.clock() - self._t0
        self._t0 = None
        self.steps += 1
        self._since += 1
        if self._warmup > 0:
            self._warmup -= 1
        else:
            self._measured[0] += self._hi - self._lo
            self._measured[1] += ns
        return self.weight

    # ---- agreeing ----

    def _state_digest(self):
        return _digest(self.size, self.global_batch, self.every, self.resplits, self.rows,
                       [r.hex() for r in self.rates])

    def _agree(self):
        """One allgather of every rank's measurements and state digest; then
        the same split() on every rank."""
        mine = np.array([self._measured[0], self._measured[1], self._state_digest()], np.int64)
        label = f"ringd.balance #{self.resplits}"
        everyone = self.conn.allgather(mine, name=label, timeout=self.timeout)
        digests = everyone[:, 2]
        odd = [r for r in range(len(digests)) if digests[r] != digests[0]]
        if odd:
            raise make_error(
                _lib.EMISMATCH,
                f"{label}: ranks {', '.join(map(str, odd))} split the global batch differently "
                "from rank 0 (a Balancer made with other arguments, or steps out of step)",
            )
        measured = [(int(r), int(ns)) for r, ns, _ in everyone]
        self.rows, self.rates = split(
            self.rows, self.rates, measured, smoothing=self.smoothing, floor=self.floor,
            max_change=self.max_change,
        )
        self.resplits += 1
        self._since = 0
        self._measured = [0, 0]
        self.history.append((self.steps, tuple(self.rows)))
        self._reported = False

    def _tell_daemon(self):
        self._reported = True
        try:
            self.conn.report_split(self.rows, self.rates, step=self.steps,
                                   resplits=self.resplits, every=self.every)
        except (_lib.RingError, ValueError) as e:
            # The daemon only shows it; training goes on without.
            warnings.warn(f"ringd.balance: cannot tell the daemon the split: {e}",
                          RuntimeWarning, stacklevel=3)
            self.report = False

    def ideal(self):
        """The rows each rank would take if the smoothed speeds were exact
        (before the floor, the cap and rounding); None until every rank has
        a speed."""
        if any(r <= 0 for r in self.rates):
            return None
        total = sum(self.rates)
        return [self.global_batch * r / total for r in self.rates]

    def __repr__(self):
        return (f"<ringd.balance.Balancer rank {self.conn.rank} of {self.size}: rows "
                f"{self.rows} of {self.global_batch}, {self.resplits} re-splits>")
