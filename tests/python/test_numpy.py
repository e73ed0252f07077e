"""ringd's Python client on NumPy arrays, 4 ranks on a ring of 4 real daemons.

Functions named rank_* run in every rank's process (pool.run); the tests
compare what they return with NumPy's own reduction of the same inputs.
Inputs are drawn from a seed and the rank, so the parent can recompute every
rank's input. Values are small integers (or dyadic fractions) where the
result must be exact in any reduction order, random floats elsewhere.
"""

import time

import numpy as np
import pytest

import ringd

DTYPES = ["int8", "uint8", "int32", "int64", "float16", "float32", "float64", "bfloat16"]
FLOATS = ["float16", "float32", "float64", "bfloat16"]
OPS = ["sum", "mean", "min", "max", "prod", "wmean"]


# ---- helpers: inputs and expected results, computed the same way everywhere ----


def bf16_bits(x):
    """bfloat16 bit patterns (uint16) of float values exactly representable."""
    return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def bf16_value(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def storage(dtype):
    return np.uint16 if dtype == "bfloat16" else np.dtype(dtype)


def make_input(dtype, op, rank, n, seed=1):
    """This rank's input: exact-friendly values for op."""
    rng = np.random.default_rng([seed, rank])
    if op == "prod":
        v = rng.choice([-2, -1, 1, 2], n) if dtype not in ("uint8",) else rng.choice([1, 2, 3], n)
    elif dtype == "uint8":
        v = rng.integers(0, 256, n)
    elif dtype == "int8":
        v = rng.integers(-128, 128, n)
    elif dtype in ("int32", "int64"):
        info = np.iinfo(dtype)
        v = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)  # sums wrap
    else:
        v = rng.integers(-8, 9, n) / 4.0  # dyadic: exact sums in every float type
    if dtype == "bfloat16":
        return bf16_bits(v)
    return np.asarray(v).astype(dtype)


def weight_of(rank):
    return float(rank + 1)


def expected(dtype, op, inputs):
    """NumPy's reduction of the ranks' inputs, in the array's dtype."""
    if dtype == "bfloat16":
        vals = np.stack([bf16_value(x) for x in inputs]).astype(np.float64)
    else:
        vals = np.stack(inputs)
    with np.errstate(over="ignore"):
        if op == "sum":
            r = vals.sum(axis=0, dtype=vals.dtype)
        elif op == "mean":
            r = vals.mean(axis=0)
        elif op == "min":
            r = vals.min(axis=0)
        elif op == "max":
            r = vals.max(axis=0)
        elif op == "prod":
            r = vals.prod(axis=0, dtype=vals.dtype)
        else:
            w = np.array([weight_of(r) for r in range(len(inputs))])
            r = (vals.astype(np.float64) * w[:, None]).sum(axis=0) / w.sum()
    if dtype == "bfloat16":
        return bf16_bits(r.astype(np.float32))
    return np.asarray(r).astype(dtype)


# ---- scenarios (run in the rank processes) ----


def rank_info(c):
    return (c.rank, c.size, c.local_rank, c.local_size)


def rank_allreduce(c, dtype, op, n, shared=False, strided=False):
    x = make_input(dtype, op, c.rank, n)
    if strided:  # every other element of a bigger array: not contiguous
        big = np.zeros(2 * n, x.dtype)
        big[::2] = x
        a = big[::2]
    elif shared:
        a = c.empty(n, "bfloat16" if dtype == "bfloat16" else dtype)
        a[:] = x
    else:
        a = x.copy()
    kw = {"weight": weight_of(c.rank)} if op == "wmean" else {}
    if dtype == "bfloat16":
        kw["dtype"] = "bfloat16"
    out = c.allreduce(a, op=op, **kw)
    assert out is a
    if strided:
        assert not big[1::2].any(), "the gaps between the elements were written"
    return np.array(a)


def rank_random_sum(c, dtype, n):
    x = np.random.default_rng([7, c.rank]).standard_normal(n).astype(dtype)
    return c.allreduce(x, op="sum")


def rank_shared_views(c):
    a = c.empty((8, 16), np.float32)
    a[:] = c.rank + 1
    c.allreduce(a[2:5], op="sum")  # a view in the middle of the block: zero copy
    c.allreduce(a[:, 3], op="max")  # a strided view of shared memory
    return a.copy()


def rank_shared_lifetime(c):
    before = len(c._state.shms)
    for i in range(50):
        a = c.empty(1 << 16, np.float64)
        a[:] = i
    view = a[::1000]  # the last block stays referenced through a view
    del a
    c.barrier()  # the next call frees the blocks whose arrays are gone
    after = len(c._state.shms)
    keep = c.empty(1000, np.int64)
    keep[:] = np.arange(1000) * (c.rank + 1)
    c.allreduce(keep)
    c.close()
    # Both blocks still referenced stay readable and writable after close.
    keep += 1
    return before, after, view[:3].tolist(), keep[:3].tolist()


def rank_mean_of_int(c):
    try:
        c.allreduce(np.arange(4, dtype=np.int32), op="mean")
    except ringd.RingError as e:
        ok = c.allreduce(np.ones(3, np.float32)).tolist()  # the connection still works
        return e.code, e.name, e.message, ok
    return None


def rank_mismatched_count(c):
    n = 10 + (1 if c.rank == 1 else 0)
    try:
        c.allreduce(np.ones(n, np.float32), name="uneven")
    except ringd.RingError as e:
        ok = c.allreduce(np.ones(3, np.float32)).tolist()
        return e.code, e.name, e.message, ok
    return None


def rank_async(c):
    a = np.full(1000, c.rank, np.float64)
    b = np.full(10, c.rank + 1, np.int64)
    g = c.empty(4, np.float32)
    g[:] = c.rank
    r1 = c.allreduce_async(a, op="max")
    r2 = c.allreduce_async(b, op="prod")
    r3 = c.allreduce_async(g, op="mean")
    out3 = r3.wait()  # completes r1 and r2 first
    assert r1.test() and r2.done
    return r1.wait()[0], r2.wait()[0], out3.tolist()


def rank_async_late(c):
    """Rank 0 submits at once; the others 0.5 s later."""
    x = np.ones(100, np.float32)
    if c.rank != 0:
        time.sleep(0.5)
        return c.allreduce(x)[0], None, None
    req = c.allreduce_async(x)
    early = req.test()
    try:
        req.wait(timeout=0.05)
        timed_out = False
    except ringd.WaitTimeout as e:
        timed_out = isinstance(e, TimeoutError) and e.code == ringd.EINPROGRESS
    return req.wait(timeout=30)[0], early, timed_out


def rank_broadcast(c, root):
    a = np.arange(12, dtype=np.float64).reshape(3, 4) * (c.rank + 1)
    t = np.zeros((4, 6), np.int32)
    t[:, ::2] = c.rank + 10  # a strided view
    c.broadcast(a, root=root)
    c.broadcast(t[:, ::2], root=root)
    return a, t


def rank_allgather(c):
    x = np.full((2, 3), c.rank, np.int32)
    out = c.allgather(x)
    bf = c.allgather(bf16_bits([c.rank + 0.5]), dtype="bfloat16")
    pre = np.zeros((c.size, 5), np.float32)
    c.allgather(np.arange(5, dtype=np.float32) + c.rank, out=pre)
    return out, bf, pre


def rank_reduce_scatter(c):
    x = np.arange(c.size * 2 * 3, dtype=np.float32).reshape(c.size * 2, 3) * (c.rank + 1)
    return c.reduce_scatter(x, op="sum")


def rank_wire_dtype(c):
    """float32 as bfloat16 on the wire; a float64 array cannot travel so."""
    rng = np.random.default_rng(c.rank)
    x = rng.uniform(-10, 10, 10001).astype(np.float32)
    got = c.allreduce(x.copy(), wire_dtype="bfloat16")
    try:
        c.allreduce(np.ones(3), wire_dtype="float16")
        refused = None
    except ringd.RingError as e:
        refused = e.name
    return x, got, refused


def rank_barrier(c):
    time.sleep(0.1 * c.rank)
    entered = time.time()
    c.barrier()
    return entered, time.time()


def rank_argument_errors(c):
    errors = {}
    for label, call in [
        ("op", lambda: c.allreduce(np.ones(2, np.float32), op="median")),
        ("wmean_no_weight", lambda: c.allreduce(np.ones(2, np.float32), op="wmean")),
        ("weight_not_wmean", lambda: c.allreduce(np.ones(2, np.float32), weight=2.0)),
        ("complex", lambda: c.allreduce(np.ones(2, np.complex64))),
        ("int16", lambda: c.allreduce(np.ones(2, np.int16))),
        ("readonly", lambda: c.allreduce(np.broadcast_to(np.ones(1, np.float32), (4,)))),
        ("list", lambda: c.allreduce([1.0, 2.0])),
        ("bf16_on_float", lambda: c.allreduce(np.ones(2, np.float32), dtype="bfloat16")),
        ("scatter_shape", lambda: c.reduce_scatter(np.ones(c.size + 1, np.float32))),
        ("wire_name", lambda: c.allreduce(np.ones(2, np.float32), wire_dtype="int8")),
    ]:
        try:
            call()
            errors[label] = None
        except Exception as e:  # noqa: BLE001 - the type is what we check
            errors[label] = type(e).__name__
    c.allreduce(np.ones(1, np.float32))  # nothing was submitted: still in step
    return errors


def rank_closed(c):
    c.close()
    try:
        c.allreduce(np.ones(1, np.float32))
    except ringd.RingError as e:
        return e.code
    return None


# ---- tests ----


def test_ranks_are_numbered_host_by_host(pool):
    assert pool.run(rank_info) == [(r, 4, 0, 1) for r in range(4)]


@pytest.mark.parametrize(
    "dtype,op",
    [(d, o) for o in OPS for d in DTYPES if d in FLOATS or o not in ("mean", "wmean")],
)
def test_allreduce_matches_numpy(pool, dtype, op):
    n = 1000
    got = pool.run(rank_allreduce, dtype, op, n)
    want = expected(dtype, op, [make_input(dtype, op, r, n) for r in range(4)])
    for r in range(4):
        assert got[r].dtype == storage(dtype)
        if op == "wmean" and dtype in ("float16", "bfloat16"):
            np.testing.assert_allclose(
                bf16_value(got[r]) if dtype == "bfloat16" else got[r].astype(np.float32),
                bf16_value(want) if dtype == "bfloat16" else want.astype(np.float32),
                rtol=1e-2, atol=1e-2,
            )
        elif op == "wmean":
            np.testing.assert_allclose(got[r], want, rtol=1e-6)
        else:
            np.testing.assert_array_equal(got[r], want)
        assert got[r].tobytes() == got[0].tobytes(), "ranks got different bits"


@pytest.mark.parametrize("dtype", ["float32", "int64", "bfloat16"])
def test_allreduce_on_shared_and_strided_arrays(pool, dtype):
    want = expected(dtype, "sum", [make_input(dtype, "sum", r, 777) for r in range(4)])
    for kw in ({"shared": True}, {"strided": True}):
        for got in pool.run(rank_allreduce, dtype, "sum", 777, **kw):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_random_floats_sum_to_numpy_and_the_same_bits_everywhere(pool, dtype):
    n = 1 << 20
    got = pool.run(rank_random_sum, dtype, n)
    inputs = [np.random.default_rng([7, r]).standard_normal(n).astype(dtype) for r in range(4)]
    want = np.sum([x.astype(np.float64) for x in inputs], axis=0)
    np.testing.assert_allclose(got[0], want, rtol=1e-5 if dtype == "float32" else 1e-12,
                               atol=1e-5 if dtype == "float32" else 1e-12)
    assert all(g.tobytes() == got[0].tobytes() for g in got)


def test_zero_sized_allreduce_is_a_collective(pool):
    got = pool.run(rank_allreduce, "float32", "sum", 0)
    assert all(g.size == 0 for g in got)


def test_views_of_shared_memory_reduce_in_place(pool):
    for r, got in enumerate(pool.run(rank_shared_views)):
        e = np.full((8, 16), r + 1, np.float32)
        e[2:5] = 1 + 2 + 3 + 4
        e[:, 3] = 4  # max over the ranks of column 3...
        e[2:5, 3] = 10  # ...whose rows 2..4 already hold the sum
        np.testing.assert_array_equal(got, e)


def test_shared_arrays_are_freed_when_unreferenced_and_survive_close(pool):
    for before, after, view, keep in pool.run(rank_shared_lifetime):
        assert after <= before + 1, f"{after - before} blocks still allocated"
        assert view == [49.0, 49.0, 49.0]
        assert keep == [1, 11, 21]


def test_mean_of_integers_is_an_error_with_the_library_message(pool):
    for code, name, message, ok in pool.run(rank_mean_of_int):
        assert code == ringd.EINVAL and name == "RINGD_EINVAL"
        assert "mean" in message and "int32" in message
        assert ok == [4.0, 4.0, 4.0]


def test_mismatched_counts_fail_on_every_rank_with_the_daemon_message(pool):
    results = pool.run(rank_mismatched_count)
    for code, name, message, ok in results:
        assert code == ringd.EMISMATCH and name == "RINGD_EMISMATCH", message
        # The daemon's message names the collective, the odd host and both counts.
        assert '"uneven"' in message and "h1" in message, message
        assert "11 x float32" in message and "10 x float32" in message, message
        assert ok == [4.0, 4.0, 4.0]


def test_requests_complete_in_order_and_keep_their_results(pool):
    for mx, prod, mean in pool.run(rank_async):
        assert mx == 3.0 and prod == 24 and mean == [1.5] * 4


def test_wait_with_a_timeout_raises_waittimeout_and_the_request_stays_valid(pool):
    got = pool.run(rank_async_late)
    assert [g[0] for g in got] == [4.0] * 4
    _, early, timed_out = got[0]
    assert early is False and timed_out is True


@pytest.mark.parametrize("root", [0, 2])
def test_broadcast_copies_the_root_array_everywhere(pool, root):
    for a, t in pool.run(rank_broadcast, root):
        np.testing.assert_array_equal(a, np.arange(12.0).reshape(3, 4) * (root + 1))
        np.testing.assert_array_equal(t[:, ::2], np.full((4, 3), root + 10))
        np.testing.assert_array_equal(t[:, 1::2], 0)


def test_allgather_stacks_the_ranks_along_a_new_axis(pool):
    for out, bf, pre in pool.run(rank_allgather):
        assert out.shape == (4, 2, 3)
        np.testing.assert_array_equal(out, np.arange(4)[:, None, None] * np.ones((4, 2, 3)))
        np.testing.assert_array_equal(bf16_value(bf)[:, 0], np.arange(4) + 0.5)
        np.testing.assert_array_equal(pre, np.arange(5)[None, :] + np.arange(4)[:, None])


def test_reduce_scatter_gives_each_rank_its_block_of_the_sum(pool):
    full = np.arange(4 * 2 * 3, dtype=np.float32).reshape(8, 3) * (1 + 2 + 3 + 4)
    for r, block in enumerate(pool.run(rank_reduce_scatter)):
        np.testing.assert_array_equal(block, full[2 * r : 2 * r + 2])


def test_wire_dtype_bfloat16_is_the_same_everywhere_and_within_its_bound(pool):
    out = pool.run(rank_wire_dtype)
    xs = np.array([x for x, _, _ in out], dtype=np.float64)
    exact, mag = xs.sum(axis=0), np.abs(xs).sum(axis=0)
    n = len(out)
    for _, got, refused in out:
        np.testing.assert_array_equal(got.view(np.uint32), out[0][1].view(np.uint32))
        assert np.all(np.abs(got - exact) <= (n + 2) * 2.0**-8 * mag * (1 + 2.0**-20))
        assert refused == "RINGD_EINVAL"


def test_barrier_waits_for_the_last_rank(pool):
    times = pool.run(rank_barrier)
    last_in = max(t for t, _ in times)
    assert all(out >= last_in for _, out in times)


def test_bad_arguments_raise_before_anything_is_submitted(pool):
    for errors in pool.run(rank_argument_errors):
        assert errors == {
            "op": "ValueError",
            "wmean_no_weight": "ValueError",
            "weight_not_wmean": "ValueError",
            "complex": "TypeError",
            "int16": "TypeError",
            "readonly": "ValueError",
            "list": "TypeError",
            "bf16_on_float": "TypeError",
            "scatter_shape": "ValueError",
            "wire_name": "ValueError",
        }


def test_a_closed_connection_raises_eclosed(pool):
    assert pool.run(rank_closed) == [ringd.ECLOSED] * 4


def test_connecting_to_no_daemon_names_the_socket(tmp_path):
    path = str(tmp_path / "nobody.sock")
    with pytest.raises(ringd.RingError) as info:
        ringd.connect(path)
    assert info.value.code == ringd.ECONNECT
    assert path in info.value.message


def rank_alone_with_timeout(c):
    start = time.monotonic()
    try:
        c.allreduce(np.ones(8, np.float32), timeout=0.5, name="lonely")
    except ringd.RingError as e:
        return e.code, e.message, time.monotonic() - start
    return None


def test_a_missing_rank_fails_the_collective_at_its_timeout():
    # A ring of its own: the ranks of the shared ring stay in step.
    from conftest import LocalRing, RankPool

    with LocalRing(2, extra_yaml="collective_timeout: 20s\n") as ring, RankPool(ring) as p:
        [(code, message, elapsed)] = p.run(rank_alone_with_timeout, ranks=[0])
    assert code == ringd.ETIMEDOUT, message
    assert "lonely" in message
    assert 0.4 <= elapsed < 10
