"""A process is one rank with one connection: connect() makes it once and
returns it afterwards, whoever asks; another socket while it is open fails
saying so; after close() the next connect() makes a new one."""

import time

import ringd


def rank_one_connection(c):
    out = {
        "same": [ringd.connect() is c, ringd.connect(c.path) is c, ringd.init() is c,
                 ringd.default_connection() is c],
    }
    for label, call in [("other socket", lambda: ringd.connect("/tmp/elsewhere.sock")),
                        ("second Connection", ringd.Connection)]:
        try:
            call()
            out[label] = None
        except ringd.RingError as e:
            out[label] = (e.code, e.message)
    return out


def test_a_second_connect_returns_the_connection_or_says_why_not(pool):
    for r, out in enumerate(pool.run(rank_one_connection)):
        assert out["same"] == [True] * 4
        code, message = out["other socket"]
        assert code == ringd.EBUSY
        assert f"already rank {r} of 4" in message and "asked for /tmp/elsewhere.sock" in message
        assert "close() it first" in message
        code, message = out["second Connection"]
        assert code == ringd.EBUSY and "ringd.Connection()" in message


def rank_reconnect(c):
    c.close()
    deadline = time.monotonic() + 10
    while True:
        try:
            again = ringd.connect()
            break
        except ringd.RingError as e:  # the daemon has not seen the close yet
            if e.code != ringd.EBUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    return again is not c, again.rank == c.rank, ringd.connect() is again


def test_after_close_connect_makes_a_new_connection(pool):
    assert pool.run(rank_reconnect) == [(True, True, True)] * 4
