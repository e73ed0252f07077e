"""ringd.elastic without daemons: State's commit, restore and sync, and run()
through ranks that leave and come back, on the in-process fake ring of
fakegroup.py (threads as ranks). NumPy only; test_elastic_torch.py does
the PyTorch objects."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import ringd
from ringd import elastic
from fakegroup import FakeConn, FakeGroup, resized_error

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(HERE, "..", "..", "client", "python")


def in_threads(fns):
    """Runs each fn() in its own thread; returns their results, or raises
    the first exception one raised."""
    out, errors = [None] * len(fns), []

    def go(i):
        try:
            out[i] = fns[i]()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            errors.append(e)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a rank thread hangs"
    if errors:
        raise errors[0]
    return out


# ---- commit and restore ----


def test_restore_goes_back_to_the_last_commit():
    s = elastic.State(w=np.arange(3.0), step=0, log=[])
    w = s.w
    s.commit()
    s.w += 1
    s.step = 5
    s.log.append("x")
    s.extra = 1
    s.restore()
    assert s.w is w, "arrays are restored in place"
    assert s.w.tolist() == [0.0, 1.0, 2.0]
    assert s.step == 0 and s.log == []
    assert not hasattr(s, "extra"), "values set after the commit go"


def test_restore_leaves_the_commit_as_it_was():
    s = elastic.State(w=np.zeros(2), cfg={"lr": 0.1})
    for _ in range(2):
        s.w[0] = 9
        s.cfg["lr"] = 5
        s.restore()
        assert s.w.tolist() == [0.0, 0.0] and s.cfg == {"lr": 0.1}


def test_a_state_is_committed_when_made():
    s = elastic.State(step=3)
    s.step = 4
    s.restore()
    assert s.step == 3


def test_a_value_of_another_shape_is_replaced():
    s = elastic.State(w=np.zeros(2))
    s.w = np.ones(5)
    s.restore()
    assert s.w.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("name", ["_x", "resizes", "joined"])
def test_reserved_names_are_no_values(name):
    with pytest.raises(ValueError):
        elastic.State(**{name: 1})


@pytest.mark.parametrize("name", ["model", "optimizer"])
def test_model_and_optimizer_need_state_dicts(name):
    with pytest.raises(TypeError, match="state_dict"):
        elastic.State(**{name: np.zeros(2)})


def test_numpy_states_need_no_torch():
    code = (
        "import sys, numpy as np\n"
        "from ringd import elastic\n"
        "s = elastic.State(w=np.zeros(3), step=1)\n"
        "s.commit(); s.restore()\n"
        "assert 'torch' not in sys.modules, 'ringd.elastic imported torch'\n"
    )
    env = dict(os.environ, PYTHONPATH=PACKAGE)
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


def test_resized_error_is_a_ring_error_exported_by_the_package():
    assert issubclass(ringd.ResizedError, ringd.RingError)
    assert "ResizedError" in ringd.__all__


# ---- sync ----


def test_sync_of_fresh_states_takes_rank_0s():
    g = FakeGroup(3)
    states = [elastic.State(w=np.full(2, float(r)), step=r) for r in range(3)]
    roots = in_threads([lambda r=r: states[r].sync(g.conn(r)) for r in range(3)])
    assert roots == [0, 0, 0]
    for s in states:
        assert s.w.tolist() == [0.0, 0.0] and s.step == 0
        assert s.joined == 1


def test_a_returning_rank_catches_up_with_the_rank_in_the_ring_longest():
    g = FakeGroup(2)
    old = [elastic.State(w=np.zeros(2), step=0) for _ in range(2)]
    conns = [g.conn(0), g.conn(1)]
    in_threads([lambda r=r: old[r].sync(conns[r]) for r in range(2)])
    for s in old:
        s.w[:] = 7
        s.step = 7
        s.commit()
    # The newcomer comes first in rank order: being rank 0 does not make it lead.
    with g.cv:
        g.epoch += 1
        g.members = [99, 0, 1]
    fresh = elastic.State(w=np.zeros(2), step=0)
    new = FakeConn(g, 99)
    for c in conns:
        c.epoch, c.seq = g.epoch, 0  # as if they had seen the resize
    everyone = [(fresh, new)] + list(zip(old, conns))
    roots = in_threads([lambda s=s, c=c: s.sync(c) for s, c in everyone])
    assert roots == [1, 1, 1], "the first of the longest members, now rank 1"
    assert fresh.step == 7 and fresh.w.tolist() == [7.0, 7.0]
    assert fresh.joined == g.epoch and old[0].joined == 1


def test_sync_sends_a_big_state_in_chunks(monkeypatch):
    monkeypatch.setattr(elastic, "CHUNK", 1000)
    g = FakeGroup(2)
    states = [elastic.State(w=np.random.default_rng(r).random(5000)) for r in range(2)]
    want = states[0].w.copy()
    in_threads([lambda r=r: states[r].sync(g.conn(r)) for r in range(2)])
    assert np.array_equal(states[1].w, want)
    assert g.collectives > 2 + 40000 // 1000


# ---- run ----

STEPS = 30
KILL_AT = 5  # member 2 dies after committing this step
JOIN_AT = 12  # a new member joins when member 0 has committed this step


class Killed(Exception):
    pass


def expected_w():
    """w after STEPS: step s adds the mean over the live ranks of
    10 s + rank, with ranks 0..2 except for steps KILL_AT..JOIN_AT - 1."""
    return sum(10.0 * s + (0.5 if KILL_AT <= s < JOIN_AT else 1.0) for s in range(STEPS))


def test_run_keeps_training_through_a_kill_and_a_return():
    g = FakeGroup(3)
    at_join, joined = threading.Event(), threading.Event()
    calls = {}

    def train(state, conn, who):
        calls[who] = calls.get(who, 0) + 1
        while state.step < STEPS:
            grad = np.full(4, 10.0 * state.step + conn.rank)
            conn.allreduce(grad, op="mean")
            state.w += grad
            state.step += 1
            state.commit()
            if who == 2 and state.step == KILL_AT:
                raise Killed()
            if who == 0 and state.step == JOIN_AT and not at_join.is_set():
                at_join.set()
                assert joined.wait(20)
        return state.w.copy()

    def rank(who, conn):
        state = elastic.State(w=np.zeros(4), step=0)
        try:
            w = elastic.run(train, conn=conn)(state, conn, who)
        except Killed:
            return None
        return w, state.step, state.resizes

    def killer_and_joiner():
        # Member 2 is gone once its thread is: the ring drops it, then a
        # fresh process comes back when member 0 is at JOIN_AT.
        t2.join(20)
        assert not t2.is_alive()
        g.leave(2)
        assert at_join.wait(20)
        conn = g.join()
        joined.set()
        return rank("new", conn)

    t2 = threading.Thread(target=lambda: rank(2, g.conn(2)))
    t2.start()
    out = in_threads([lambda: rank(0, g.conn(0)), lambda: rank(1, g.conn(1)), killer_and_joiner])
    t2.join(10)
    want = expected_w()
    for w, step, _ in out:
        assert step == STEPS
        assert np.allclose(w, want), (w, want)
    assert [o[2] for o in out] == [2, 2, 0], "the old ranks saw two resizes, the new one none"
    assert calls == {0: 3, 1: 3, 2: 1, "new": 1}


def test_run_syncs_again_when_the_sync_itself_is_resized():
    g = FakeGroup(2)

    class FailsFirstAllgather(FakeConn):
        failed = False

        def allgather(self, array, name=None):
            if not self.failed:
                self.failed = True
                raise resized_error(self.group)
            return super().allgather(array, name)

    def rank(r):
        state = elastic.State(x=np.full(1, float(r)))
        conn = FailsFirstAllgather(g, r)
        seen = []
        f = elastic.run(lambda s: s.x.copy(), conn=conn, on_resize=lambda s, e: seen.append(e))
        return f(state), state.resizes, seen

    for x, resizes, seen in in_threads([lambda r=r: rank(r) for r in range(2)]):
        assert x.tolist() == [0.0]
        assert resizes == 1 and isinstance(seen[0], ringd.ResizedError)


def test_run_gives_up_after_max_resizes():
    g = FakeGroup(1)
    calls = []

    def train(state):
        calls.append(1)
        raise resized_error(g)

    with pytest.raises(ringd.ResizedError):
        elastic.run(train, conn=g.conn(0), max_resizes=2)(elastic.State())
    assert len(calls) == 3


def test_run_passes_other_errors_and_results_through():
    g = FakeGroup(1)
    f = elastic.run(conn=g.conn(0))(lambda state, a, b=0: (state.v, a, b))
    assert f(elastic.State(v=1), 2, b=3) == (1, 2, 3)
    with pytest.raises(KeyError):
        elastic.run(lambda s: {}["x"], conn=g.conn(0))(elastic.State())


def test_run_goes_back_to_the_commit_and_retries_when_the_ring_breaks():
    # ERING, EABORTED, ETIMEDOUT: every rank gets the same one for the same
    # collective, before a resize or without one; each goes back and retries.
    g = FakeGroup(1)
    errors = []

    def train(state):
        if len(errors) < 3:
            state.w += 1  # a step in progress, lost
            name = ["RINGD_ERING", "RINGD_EABORTED", "RINGD_ETIMEDOUT"][len(errors)]
            raise ringd.RingError(-8, name, "ring broken")
        return state.w.copy()

    f = elastic.run(train, conn=g.conn(0), on_error=lambda s, e: errors.append(e.name))
    w = f(elastic.State(w=np.zeros(2)))
    assert errors == ["RINGD_ERING", "RINGD_EABORTED", "RINGD_ETIMEDOUT"]
    assert np.array_equal(w, np.zeros(2)), "each retry starts from the last commit"


def test_run_gives_up_on_a_ring_that_stays_broken_for_retry_for():
    g = FakeGroup(1)

    def train(state):
        raise ringd.RingError(-8, "RINGD_ERING", "ring broken")

    with pytest.raises(ringd.RingError, match="ring broken"):
        elastic.run(train, conn=g.conn(0), retry_for=0.3)(elastic.State())
    with pytest.raises(ringd.RingError, match="RINGD_EMISMATCH"):
        elastic.run(lambda s: (_ for _ in ()).throw(ringd.RingError(-9, "RINGD_EMISMATCH", "")),
                    conn=g.conn(0))(elastic.State())
