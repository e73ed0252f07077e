"""One process per rank, connected to a LocalRing, running test code on demand.

    with LocalRing(4) as ring, RankPool(ring) as pool:
        results = pool.run(scenario, arg)     # scenario(c, arg) on every rank at once
        started = pool.start(scenario, arg)   # the same without waiting...
        pool.kill_rank(2)                     # ...to crash a rank meanwhile
        results = pool.gather(started, ranks=[0, 1, 3])

scenario is a module-level function (it is pickled by reference), called in
each rank's process with that process's ringd.Connection; run() returns the
list of its return values, in rank order, or raises RankFailed with every
failing rank's traceback. A rank whose connection was closed (by the scenario
or by an error) connects again before its next scenario. Every wait has a
deadline: a pool that misses one is killed, and the test fails instead of
hanging.
"""

import multiprocessing
import multiprocessing.connection
import os
import time
import traceback

from timing import scaled  # tests/, on the path through conftest.py

DEFAULT_TIMEOUT = 60.0


class RankFailed(AssertionError):
    pass


def _connect():
    import ringd

    deadline = time.monotonic() + 10
    while True:
        try:
            return ringd.connect()
        except ringd.RingError as e:
            # The daemon may not have seen our previous session end yet.
            if e.code != ringd.EBUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _worker(pipe, env):
    os.environ.update(env)
    conn = None
    while True:
        try:
            task = pipe.recv()
        except EOFError:
            break
        if task is None:
            break
        fn, args, kwargs = task
        try:
            if conn is None or conn.closed:
                conn = _connect()
            pipe.send(("ok", fn(conn, *args, **kwargs)))
        except BaseException:
            pipe.send(("err", traceback.format_exc()))
    if conn is not None:
        conn.close()


class RankPool:
    def __init__(self, ring, extra_env=None):
        ctx = multiprocessing.get_context("spawn")
        self.size = ring.size
        self.procs, self.pipes = [], []
        base = {"OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        base.update(extra_env or {})
        for r in range(ring.size):
            env = dict(base, RINGD_SOCKET=ring.socket_of(r),
                       RINGD_LOCAL_RANK=str(r % ring.local_clients))
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(child, env), daemon=True, name=f"rank{r}")
            p.start()
            child.close()
            self.procs.append(p)
            self.pipes.append(parent)
        self.broken = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def run(self, fn, *args, timeout=DEFAULT_TIMEOUT, ranks=None, **kwargs):
        """fn(conn, *args, **kwargs) on every rank (or on the ranks listed)."""
        return self.gather(self.start(fn, *args, ranks=ranks, **kwargs), timeout)

    def start(self, fn, *args, ranks=None, **kwargs):
        """Starts fn on the ranks (default all) without waiting; gather()
        waits for them. Returns what gather() takes."""
        if self.broken:
            raise RankFailed("the rank pool was killed by an earlier timeout")
        ranks = list(range(self.size)) if ranks is None else list(ranks)
        for r in ranks:
            self.pipes[r].send((fn, args, kwargs))
        return fn.__name__, ranks

    def gather(self, started, timeout=DEFAULT_TIMEOUT, ranks=None):
        """The results of start()'s call, in rank order, from the ranks
        listed (default all it started: a test that killed one leaves it
        out). timeout is stretched for the machine's load (tests/timing.py)."""
        timeout = scaled(timeout)
        what, started_ranks = started
        ranks = started_ranks if ranks is None else list(ranks)
        results, errors = {}, []
        deadline = time.monotonic() + timeout
        waiting = {self.pipes[r]: r for r in ranks}
        while waiting:
            left = deadline - time.monotonic()
            ready = multiprocessing.connection.wait(list(waiting), max(0.0, left))
            if not ready:
                self.kill()
                raise RankFailed(
                    f"{what}: ranks {sorted(waiting.values())} did not finish "
                    f"within {timeout:.0f} s"
                )
            for pipe in ready:
                r = waiting.pop(pipe)
                try:
                    status, value = pipe.recv()
                except EOFError:
                    self.kill()
                    raise RankFailed(f"{what}: rank {r}'s process died") from None
                if status == "ok":
                    results[r] = value
                else:
                    errors.append(f"---- rank {r}:\n{value}")
        if errors:
            raise RankFailed(f"{what} failed:\n" + "\n".join(errors))
        return [results[r] for r in ranks]

    def kill_rank(self, r):
        """SIGKILLs rank r's process, as a crash would; the pool can only be
        closed afterwards."""
        self.broken = True
        self.procs[r].kill()
        self.procs[r].join(5)

    def kill(self):
        self.broken = True
        for p in self.procs:
            if p.is_alive():
                p.kill()
        for p in self.procs:
            p.join(5)

    def close(self):
        if not self.broken:
            for pipe in self.pipes:
                try:
                    pipe.send(None)
                except OSError:
                    pass
            for p in self.procs:
                p.join(10)
        self.kill()
        for pipe in self.pipes:
            pipe.close()
