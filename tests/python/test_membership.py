"""Connection.membership() and ringd.elastic against real daemons: a ring
whose membership does not change (the daemons' resizes are tested end to
end with the daemon)."""

import numpy as np

from ringd import elastic


def rank_membership(c):
    c.barrier()  # every rank is there: the ring is ready
    m = c.membership()
    return m, c.rank, c.size


def test_membership_names_every_host_and_this_ranks_place(pool):
    for r, (m, rank, size) in enumerate(pool.run(rank_membership)):
        assert (m["rank"], m["size"]) == (rank, size) == (r, 4)
        assert m["ready"] is True
        assert len(m["hosts"]) == 4 and m["live"] == m["hosts"] and m["out"] == []
        assert isinstance(m["epoch"], int)


def rank_elastic_run(c):
    state = elastic.State(w=np.full(3, float(c.rank)), step=0)

    @elastic.run(conn=c)
    def train(state):
        while state.step < 5:
            g = np.full(3, float(c.rank))
            c.allreduce(g)
            state.w += g
            state.step += 1
            state.commit()
        return state.w.tolist(), state.joined, state.resizes

    return train(state)


def test_run_trains_from_rank_0s_state_on_a_steady_ring(pool):
    out = pool.run(rank_elastic_run)
    # Every rank starts from rank 0's w (zeros) and adds 0+1+2+3 five times.
    assert [o[0] for o in out] == [[30.0] * 3] * 4
    assert all(o[1] is not None and o[2] == 0 for o in out)
