"""Connection.gather, scatter and alltoall (libringd's ringd_gather,
ringd_scatter and ringd_alltoall) on a ring of 4 real daemons.

Functions named rank_* run in every rank's process (pool.run); the tests
recompute every rank's input in the parent and compare each rank's result
with NumPy's own stacking, slicing and transposing of those inputs. Inputs
differ per rank and per call: 1000 rank + 10 call + index (modulo 2048 for
the 2-byte types, where such integers are exact).
"""

import numpy as np
import pytest

import ringd

DTYPES = ["float32", "int64", "float16", "bfloat16"]


def bf16_bits(x):
    return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def values(dtype, rank, call, shape):
    """Rank's input of call, of shape, in dtype (bfloat16 as uint16 bits)."""
    n = int(np.prod(shape))
    v = 1000 * rank + 10 * call + np.arange(n)
    if dtype == "float16":
        v = v % 2048
    if dtype == "bfloat16":
        return bf16_bits(v % 256).reshape(shape)  # exact in bfloat16's 8 bits
    return v.astype(dtype).reshape(shape)


def kw(dtype):
    return {"dtype": "bfloat16"} if dtype == "bfloat16" else {}


# ---- in the ranks ----


def rank_gather(c, dtype, root, call):
    x = values(dtype, c.rank, call, (3, 2))
    return c.gather(x, root=root, **kw(dtype))


def rank_scatter(c, dtype, root, call):
    if c.rank == root:
        return c.scatter(values(dtype, root, call, (c.size * 2, 3)), root=root, **kw(dtype))
    if c.rank % 2:  # the others say what they get either way
        return c.scatter(None, root=root, shape=(2, 3), dtype=dtype)
    out = np.empty((2, 3), np.uint16 if dtype == "bfloat16" else dtype)
    got = c.scatter(None, root=root, out=out, **kw(dtype))
    assert got is out
    return got


def rank_alltoall(c, dtype, call):
    x = values(dtype, c.rank, call, (c.size * 2, 5))
    return c.alltoall(x, **kw(dtype))


def rank_errors(c):
    errors = {}
    x = np.zeros(4, np.float32)
    for key, fn in {
        "gather_root": lambda: c.gather(x, root=c.size),
        "scatter_root": lambda: c.scatter(None, root=c.size, shape=1),
        "alltoall_split": lambda: c.alltoall(np.zeros(c.size + 1, np.float32)),
        "scatter_no_shape": lambda: c.scatter(None, root=(c.rank + 1) % c.size),
    }.items():
        try:
            fn()
            errors[key] = None
        except ringd.RingError as e:
            errors[key] = (e.name, str(e))
        except (ValueError, TypeError) as e:
            errors[key] = (type(e).__name__, str(e))
    # The ring goes on: count 0, then a gather with data.
    empty = c.gather(np.zeros((0,), np.float32), root=0)
    after = c.gather(np.full(2, c.rank, np.int64), root=0)
    return errors, empty, after


def rank_count_mismatch(c):
    n = 5 if c.rank == 3 else 4
    try:
        c.gather(np.zeros(n, np.float32), root=1)
        return None
    except ringd.RingError as e:
        return e.code, str(e)


# ---- in the parent ----


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_stacks_every_rank_on_the_root_and_gives_none_elsewhere(pool, dtype):
    for call, root in enumerate([0, 3, 1]):
        out = pool.run(rank_gather, dtype, root, call)
        n = len(out)
        want = np.stack([values(dtype, r, call, (3, 2)) for r in range(n)])
        for r, got in enumerate(out):
            if r == root:
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(got, want)
            else:
                assert got is None


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_gives_each_rank_its_block_of_the_root_array(pool, dtype):
    for call, root in enumerate([2, 0]):
        out = pool.run(rank_scatter, dtype, root, call)
        n = len(out)
        full = values(dtype, root, call, (n * 2, 3))
        for r, got in enumerate(out):
            np.testing.assert_array_equal(got, full[2 * r : 2 * r + 2])


@pytest.mark.parametrize("dtype", DTYPES)
def test_alltoall_gives_each_rank_the_blocks_addressed_to_it(pool, dtype):
    for call in range(2):
        out = pool.run(rank_alltoall, dtype, call)
        n = len(out)
        # inputs[j] split into n blocks: block i goes to rank i.
        blocks = np.stack([values(dtype, j, call, (n * 2, 5)).reshape(n, 2, 5) for j in range(n)])
        for r, got in enumerate(out):
            np.testing.assert_array_equal(got, blocks[:, r].reshape(n * 2, 5))


def test_bad_arguments_fail_on_every_rank_and_the_ring_goes_on(pool):
    out = pool.run(rank_errors)
    for r, (errors, empty, after) in enumerate(out):
        assert errors["gather_root"][0] == "RINGD_EINVAL", errors
        assert "root" in errors["gather_root"][1]
        assert errors["scatter_root"][0] == "RINGD_EINVAL", errors
        assert errors["alltoall_split"][0] == "ValueError"
        assert errors["scatter_no_shape"][0] == "ValueError"
        if r == 0:
            assert empty.shape == (len(out), 0)
            np.testing.assert_array_equal(after, np.repeat(np.arange(len(out)), 2).reshape(-1, 2))
        else:
            assert empty is None and after is None


def test_a_count_mismatch_fails_on_every_rank_with_the_same_message(pool):
    out = pool.run(rank_count_mismatch)
    assert all(o is not None and o[0] == ringd.EMISMATCH for o in out), out
    assert len({o[1] for o in out}) == 1, out
    assert "gather to rank 1" in out[0][1] and "differs" in out[0][1]
