"""The torch.distributed backend "ringd", 4 ranks on a ring of 4 real
daemons: init_process_group("ringd") with no address or store, every
collective sync and async, errors from wait(), a Gloo group beside the ring
(MASTER_ADDR set) and the message without one, DistributedDataParallel
training against one process on the whole batches (training.py), futures
whose callbacks issue collectives, torch's compression hooks, and the calls
built on the ring's collectives (gather, scatter, all-to-all, coalesced)
against Gloo on the same inputs, also with 3 ranks and 2 ranks per host.

The backend's C++ half must be built (the tests are skipped without it:
CMake builds it when libtorch-dev is installed, except in sanitized builds).
"""

import gc
import os

import numpy as np
import pytest
from conftest import import_torch, pool_holder, running_ring

torch = import_torch()
dist = pytest.importorskip("torch.distributed")

import ringd  # noqa: E402
import ringd.torch  # noqa: E402,F401 - registers the backend
from ringd.torch import _distributed  # noqa: E402
from training import TOLERANCE, train  # noqa: E402

try:
    _distributed._extension()
except RuntimeError as e:  # not built
    pytest.skip(str(e), allow_module_level=True)


def initialized(fn):
    """Runs fn(c, ...) between init_process_group("ringd") and
    destroy_process_group(), as the rank processes of a test do."""

    def run(c, *args, **kwargs):
        dist.init_process_group("ringd")
        try:
            return fn(c, *args, **kwargs)
        finally:
            dist.destroy_process_group()

    run.__name__ = fn.__name__
    return run


# ---- scenarios (run in the rank processes; module-level so they pickle) ----


def rank_init(c):
    dist.init_process_group("ringd")
    try:
        pg = dist.group.WORLD
        return (dist.get_rank(), dist.get_world_size(), dist.get_backend(), pg.rank(),
                pg.size(), "MASTER_ADDR" in os.environ)
    finally:
        dist.destroy_process_group()


def rank_collectives(c):
    dist.init_process_group("ringd")
    try:
        r, n = dist.get_rank(), dist.get_world_size()
        out = {}
        for op in ("SUM", "AVG", "MIN", "MAX", "PRODUCT"):
            for async_op in (False, True):
                t = torch.tensor([r + 1.0, -(r + 1.0), 2.0])
                work = dist.all_reduce(t, op=getattr(dist.ReduceOp, op), async_op=async_op)
                if async_op:
                    work.wait()
                out[f"all_reduce {op} {async_op}"] = t.tolist()
        ints = torch.arange(4, dtype=torch.int64) * (r + 1)
        dist.all_reduce(ints)
        out["int64"] = ints.tolist()
        b = torch.full((2, 3), float(r))
        dist.broadcast(b, src=2)
        out["broadcast"] = b.tolist()
        flags = torch.tensor([r == 1, True])  # bool: moved as bytes
        dist.broadcast(flags, src=1)
        out["broadcast bool"] = flags.tolist()
        red = torch.tensor([float(r)])
        dist.reduce(red, dst=3)
        out["reduce"] = red.tolist()
        gathered = [torch.empty(2) for _ in range(n)]
        work = dist.all_gather(gathered, torch.tensor([r, 10.0 * r]), async_op=True)
        work.wait()
        out["all_gather"] = [g.tolist() for g in gathered]
        into = torch.empty(n * 2)
        dist.all_gather_into_tensor(into, torch.tensor([r, 10.0 * r]))
        out["all_gather_into_tensor"] = into.tolist()
        mine = torch.empty(2)
        dist.reduce_scatter(mine, [torch.tensor([k, r + 0.0]) for k in range(n)])
        out["reduce_scatter"] = mine.tolist()
        mine = torch.empty(2)
        dist.reduce_scatter_tensor(mine, torch.arange(2.0 * n) * (r + 1))
        out["reduce_scatter_tensor"] = mine.tolist()
        objects = [None] * n
        dist.all_gather_object(objects, {"rank": r})
        out["all_gather_object"] = objects
        listed = [f"from {r}"]
        dist.broadcast_object_list(listed, src=0)
        out["broadcast_object_list"] = listed
        dist.barrier()
        work = dist.barrier(async_op=True)
        work.wait()
        t = torch.ones(3) * r
        fut = dist.all_reduce(t, async_op=True).get_future()
        out["future"] = fut.wait()[0].tolist()
        return out
    finally:
        dist.destroy_process_group()


def test_every_collective_sync_and_async(pool):
    n = 4
    for r, out in enumerate(pool.run(rank_collectives)):
        for async_op in (False, True):
            assert out[f"all_reduce SUM {async_op}"] == [10.0, -10.0, 8.0]
            assert out[f"all_reduce AVG {async_op}"] == [2.5, -2.5, 2.0]
            assert out[f"all_reduce MIN {async_op}"] == [1.0, -4.0, 2.0]
            assert out[f"all_reduce MAX {async_op}"] == [4.0, -1.0, 2.0]
            assert out[f"all_reduce PRODUCT {async_op}"] == [24.0, 24.0, 16.0]
        assert out["int64"] == [0, 10, 20, 30]
        assert out["broadcast"] == [[2.0] * 3] * 2
        assert out["broadcast bool"] == [True, True]
        if r == 3:
            assert out["reduce"] == [6.0]
        assert out["all_gather"] == [[k, 10.0 * k] for k in range(n)]
        assert out["all_gather_into_tensor"] == [v for k in range(n) for v in (k, 10.0 * k)]
        assert out["reduce_scatter"] == [4.0 * r, 6.0]
        assert out["reduce_scatter_tensor"] == [(2 * r) * 10.0, (2 * r + 1) * 10.0]
        assert out["all_gather_object"] == [{"rank": k} for k in range(n)]
        assert out["broadcast_object_list"] == ["from 0"]
        assert out["future"] == [6.0] * 3


def rank_errors(c):
    dist.init_process_group("ringd")
    try:
        out = {}
        # Ranks asking for different reductions of the same tensor: the
        # daemon fails it on every rank, and wait() raises its message.
        t = torch.ones(5)
        op = dist.ReduceOp.SUM if c.rank else dist.ReduceOp.MAX
        work = dist.all_reduce(t, op=op, async_op=True)
        try:
            work.wait()
        except ringd.RingError as e:
            out["wait"] = (type(e).__name__, e.code, e.message)
        fut = dist.all_reduce(t, op=op, async_op=True).get_future()
        try:
            fut.wait()
        except Exception as e:  # noqa: BLE001 - torch's type for it
            out["future"] = str(e)
        try:
            dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.AVG)
        except ValueError as e:
            out["avg int"] = str(e)
        try:
            dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND)
        except ValueError as e:
            out["band"] = str(e)
        shape = (2, 6) if c.rank == 3 else (3, 4)
        try:
            dist.all_reduce(torch.ones(shape))
        except ringd.RingError as e:
            out["shape"] = e.message
        dist.barrier()  # and the ring goes on
        out["after"] = True
        return out
    finally:
        dist.destroy_process_group()


def test_errors_surface_from_wait_with_ringds_message(pool):
    for out in pool.run(rank_errors):
        name, code, message = out["wait"]
        assert name == "RingError" and code == ringd.EMISMATCH
        assert "all_reduce" in message and "differs between ranks" in message, message
        assert "RINGD_EMISMATCH" in out["future"] or "differs between ranks" in out["future"]
        assert "float tensors only" in out["avg int"]
        assert "no band reduction" in out["band"]
        assert out["shape"] == "all_reduce: tensor: rank 3 has (2, 6) float32, rank 0 has (3, 4)"
        assert out["after"]


def rank_disagreeing_rank(c):
    os.environ["RANK"] = str((c.rank + 1) % c.size)
    try:
        dist.init_process_group("ringd")
    except ValueError as e:
        return str(e)
    finally:
        del os.environ["RANK"]
    dist.destroy_process_group()
    return None


def test_a_rank_that_disagrees_with_the_daemon_is_refused_clearly(pool):
    for r, message in enumerate(pool.run(rank_disagreeing_rank)):
        assert message and f"RANK={(r + 1) % 4} (environment)" in message
        assert f"makes this process rank {r} of 4" in message


def rank_subgroup(c):
    dist.init_process_group("ringd")
    try:
        group = dist.new_group([0, 1])  # made on every rank, so that none waits
        message = "no subgroup"
        if c.rank < 2:
            try:
                dist.all_reduce(torch.ones(1), group=group)
            except ValueError as e:
                message = str(e)
        dist.barrier()  # the ring goes on
        return message
    finally:
        dist.destroy_process_group()


def test_subgroups_are_refused_when_used(pool):
    for r, message in enumerate(pool.run(rank_subgroup)):
        assert "not subgroups" in message if r < 2 else message == "no subgroup"


def rank_side_group(c, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        dist.init_process_group("ringd")  # torch's env:// store; no RANK: the daemon's
    finally:
        del os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
    try:
        r = dist.get_rank()
        side = dist.new_group([0, 2], backend="gloo")  # made on every rank
        part = torch.tensor([r + 1.0])
        if r in (0, 2):
            dist.all_reduce(part, group=side)
        whole = torch.tensor([r + 1.0])
        dist.all_reduce(whole)  # over the ring
        return dist.get_backend(), dist.get_world_size(), part.item(), whole.item()
    finally:
        dist.destroy_process_group()


def test_with_master_addr_a_group_of_another_backend_works_beside_the_ring(pool):
    from ringd.launch import free_ports

    got = pool.run(rank_side_group, free_ports(1)[0], timeout=60)
    assert got == [("ringd", 4, 4.0, 10.0), ("ringd", 4, 2.0, 10.0), ("ringd", 4, 4.0, 10.0),
                   ("ringd", 4, 4.0, 10.0)]


def rank_unshared_store(c):
    dist.init_process_group("ringd")
    try:
        store = _distributed._stores[-1]
        store.set(f"mine {c.rank}", b"x")
        try:
            store.get(f"mine {(c.rank + 1) % 4}")
        except KeyError as e:
            return str(e)
        return None
    finally:
        dist.destroy_process_group()


def test_without_an_address_the_store_says_how_to_share_one(pool):
    for message in pool.run(rank_unshared_store):
        assert message and "shares nothing between ranks" in message
        assert "set MASTER_ADDR and MASTER_PORT" in message and "tcp://HOST:PORT" in message


def test_init_process_group_needs_no_address_and_takes_the_daemons_ranks(pool):
    for r, got in enumerate(pool.run(rank_init)):
        assert got == (r, 4, "ringd", r, 4, False)


def rank_ddp(c, dtype, bucket_cap_mb):
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("ringd")
    try:
        def wrap(model, opt):
            return DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb), opt

        # Each rank starts from other weights: DDP broadcasts rank 0's.
        return train(dtype, rank=c.rank, size=c.size, wrap=wrap, steps=10,
                     model_seed=3 if c.rank == 0 else 11)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("bucket_cap_mb", [25, 0.001])
def test_ddp_trains_four_replicas_like_one_process(pool, dtype, bucket_cap_mb):
    weights = pool.run(rank_ddp, dtype, bucket_cap_mb)
    for w in weights[1:]:
        assert w.tobytes() == weights[0].tobytes(), "replicas differ"
    assert np.abs(weights[0] - train(dtype, steps=10)).max() <= TOLERANCE[dtype]


# ---- futures whose callbacks issue collectives (issue 26) ----


def rank_collective_in_a_callback(c):
    """A then() callback that issues a collective and waits for it, as
    PowerSGD's hooks do: the callback runs on a thread that may wait, and
    the collective it waits for completes."""
    dist.init_process_group("ringd")
    try:
        r = dist.get_rank()

        def twice(fut):
            t = fut.value()[0] * 2
            dist.all_reduce(t)  # synchronous, inside the callback
            inner = dist.all_reduce(t + 1, async_op=True).get_future()
            return inner.wait()[0]  # a future waited on inside the callback

        t = torch.full((3,), float(r + 1))
        out = dist.all_reduce(t, async_op=True).get_future().then(twice).wait()
        chained = (dist.all_reduce(torch.ones(2), async_op=True).get_future()
                   .then(lambda f: f.value()[0] + 1)
                   .then(lambda f: dist.all_reduce(f.value(), async_op=True).get_future().wait()[0]))
        return out.tolist(), chained.wait().tolist()
    finally:
        dist.destroy_process_group()


def test_a_callback_may_issue_and_wait_on_collectives(pool):
    # 1+2+3+4 = 10; x2, summed: 80; +1, summed: 324. ones summed: 4; +1: 5; summed: 20.
    for out, chained in pool.run(rank_collective_in_a_callback, timeout=30):
        assert out == [324.0] * 3
        assert chained == [20.0] * 2


def rank_ddp_hook(c, hook_name, steps, backend, store_dir=None):
    """DDP with one of torch's communication hooks: the same model and
    batches on ringd and, with backend "gloo", over a file store."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel

    if backend == "ringd":
        dist.init_process_group("ringd")
    else:
        dist.init_process_group("gloo", init_method=f"file://{store_dir}/store",
                                rank=c.rank, world_size=c.size)
    try:
        torch.manual_seed(5)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 4)).double()
        ddp = DistributedDataParallel(model, bucket_cap_mb=0.001)
        if hook_name == "fp16":
            ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        else:
            state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                                start_powerSGD_iter=2, random_seed=7)
            hook = (powerSGD_hook.powerSGD_hook if hook_name == "powerSGD"
                    else powerSGD_hook.batched_powerSGD_hook)
            ddp.register_comm_hook(state, hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        gen = torch.Generator().manual_seed(100 + c.rank)
        losses = []
        for _ in range(steps):
            x = torch.randn(8, 16, generator=gen, dtype=torch.float64)
            y = torch.randn(8, 4, generator=gen, dtype=torch.float64)
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        w = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy().copy()
        # The hook's closures hold the process group: dropped here, not by
        # whichever thread completes a future last (a Gloo worker thread
        # that ends up destroying its own process group aborts the process).
        del ddp, opt
        gc.collect()
        return w, losses
    finally:
        dist.destroy_process_group()


# torch 1.13's batched_powerSGD_hook cannot run on any backend: it hands
# 2-D matrices to _orthogonalize(), which asserts that they are 3-D.
@pytest.mark.parametrize("hook_name", ["powerSGD", "fp16"])
def test_ddp_with_torchs_compression_hooks_matches_gloo(pool, tmp_path, hook_name):
    steps = 6
    ours = pool.run(rank_ddp_hook, hook_name, steps, "ringd", timeout=120)
    for w, _ in ours[1:]:
        assert w.tobytes() == ours[0][0].tobytes(), "replicas differ"
    theirs = pool.run(rank_ddp_hook, hook_name, steps, "gloo", str(tmp_path), timeout=120)
    # The same algorithm on the same inputs; only the order of additions
    # (and, for fp16, its rounding) differ.
    tol = 1e-3 if hook_name == "fp16" else 1e-6
    assert np.abs(ours[0][0] - theirs[0][0]).max() <= tol
    assert np.allclose([l for _, ls in ours for l in ls], [l for _, ls in theirs for l in ls],
                       rtol=tol, atol=tol)


# ---- gather, scatter, all-to-all, the coalesced calls: as Gloo does them (issue 26) ----


def rank_more_collectives(c, backend, store_dir=None):
    """The calls built on the ring's collectives, on inputs that differ by
    rank and by call, with ringd or with Gloo over a file store."""
    if backend == "ringd":
        dist.init_process_group("ringd")
    else:
        dist.init_process_group("gloo", init_method=f"file://{store_dir}/store",
                                rank=c.rank, world_size=c.size)
    try:
        r, n = dist.get_rank(), dist.get_world_size()
        out = {}

        def base(call):
            return torch.arange(6.0).reshape(2, 3) * (r + 1) + 100 * call

        for call, dst in enumerate((0, n - 1)):
            got = [torch.empty(2, 3) for _ in range(n)] if r == dst else None
            dist.gather(base(call), got, dst=dst)
            out[f"gather {dst}"] = [g.tolist() for g in got] if got else None
        for call, src in enumerate((1, 0)):
            mine = torch.empty(4)
            parts = [torch.full((4,), 10.0 * k + call) for k in range(n)] if r == src else None
            dist.scatter(mine, parts, src=src)
            out[f"scatter {src}"] = mine.tolist()
        objs = [None] * n if r == 0 else None
        dist.gather_object({"rank": r, "sq": r * r}, objs, dst=0)
        out["gather_object"] = objs
        got = [None]
        dist.scatter_object_list(got, [f"to {k}" for k in range(n)] if r == 2 else None, src=2)
        out["scatter_object_list"] = got
        # Even all_to_all_single: block k goes to rank k.
        src = torch.arange(n * 2, dtype=torch.float64) + 1000 * r
        dst = torch.empty(n * 2, dtype=torch.float64)
        dist.all_to_all_single(dst, src)
        out["all_to_all_single"] = dst.tolist()
        # Uneven: rank r sends k + r + 1 rows of 2 to rank k.
        send = [k + r + 1 for k in range(n)]
        recv = [r + j + 1 for j in range(n)]
        src = torch.arange(sum(send) * 2, dtype=torch.int64).reshape(-1, 2) + 10000 * r
        dst = torch.empty(sum(recv), 2, dtype=torch.int64)
        work = dist.all_to_all_single(dst, src, recv, send, async_op=True)
        work.wait()
        out["all_to_all_single uneven"] = dst.tolist()
        if backend == "ringd":  # Gloo has no all_to_all of lists
            # Another shape per pair: rank j sends rank r (r + 1, j + 1) of 10 j + r.
            ins = [torch.full((k + 1, r + 1), float(10 * r + k)).t() for k in range(n)]
            outs = [torch.empty(r + 1, j + 1) for j in range(n)]
            dist.all_to_all(outs, [i.contiguous() for i in ins])
            out["all_to_all"] = [o.tolist() for o in outs]
        ts = [torch.full((3,), float(r + 1)), torch.arange(4.0).reshape(2, 2) * (r + 1)]
        dist.all_reduce_coalesced(ts)
        out["all_reduce_coalesced"] = [t.tolist() for t in ts]
        ins = [torch.tensor([float(r)]), torch.full((2, 2), r + 0.5)]
        outs = [[torch.empty(1), torch.empty(2, 2)] for _ in range(n)]
        dist.all_gather_coalesced(outs, ins)
        out["all_gather_coalesced"] = [[t.tolist() for t in o] for o in outs]
        red = torch.full((3,), float(r + 1))
        dist.reduce(red, dst=1)
        out["reduce"] = red.tolist()  # only rank 1's buffer changes
        return out
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module", params=["4 hosts", "3 hosts", "2 hosts x 2 ranks"])
def rings(request, _pool_holder):
    """Rank processes of the session's 4 hosts, of 3 hosts, and of 2 hosts
    with 2 ranks each."""
    if request.param == "4 hosts":
        yield _pool_holder
        return
    hosts, local = (3, 1) if request.param == "3 hosts" else (2, 2)
    with running_ring(hosts, local) as ring, pool_holder(ring) as holder:
        yield holder


def test_gather_scatter_all_to_all_and_coalesced_calls_give_what_gloo_gives(rings, tmp_path):
    pool = rings.get()
    ours = pool.run(rank_more_collectives, "ringd", timeout=60)
    theirs = pool.run(rank_more_collectives, "gloo", str(tmp_path), timeout=60)
    n = len(ours)
    total = n * (n + 1) / 2
    for r in range(n):
        assert ours[r].pop("all_to_all") == [[[10.0 * j + r] * (j + 1)] * (r + 1)
                                             for j in range(n)]
        # Gloo leaves partial sums in reduce's other buffers; ringd, nothing.
        assert ours[r].pop("reduce") == ([total] * 3 if r == 1 else [r + 1.0] * 3)
        gloo_reduce = theirs[r].pop("reduce")
        if r == 1:
            assert gloo_reduce == [total] * 3
        assert ours[r] == theirs[r], (r, {k: (v, theirs[r].get(k)) for k, v in ours[r].items()
                                          if v != theirs[r].get(k)})
    # And what they are, in case both are wrong the same way.
    assert ours[0]["gather 0"][2] == [[3.0 * v for v in row] for row in [[0, 1, 2], [3, 4, 5]]]
    assert ours[1]["gather 0"] is None
    assert ours[n - 1]["scatter 1"] == [10.0 * (n - 1)] * 4
    assert ours[0]["gather_object"] == [{"rank": k, "sq": k * k} for k in range(n)]
    assert ours[n - 1]["scatter_object_list"] == [f"to {n - 1}"]
    assert ours[1]["all_to_all_single"] == [1000.0 * j + 2 + e for j in range(n) for e in (0, 1)]


def rank_bad_all_to_all(c):
    dist.init_process_group("ringd")
    try:
        r, n = dist.get_rank(), dist.get_world_size()
        send = [2] * n
        recv = [2] * n
        if r == 1:
            send[3] = 1  # rank 3 expects 2 rows from rank 1
        src = torch.zeros(sum(send), 3)
        dst = torch.zeros(sum(recv), 3)
        try:
            dist.all_to_all_single(dst, src, recv, send)
        except ringd.RingError as e:
            return e.code, str(e)
        return None
    finally:
        dist.destroy_process_group()


def test_an_all_to_all_whose_sizes_disagree_fails_alike_on_every_rank(pool):
    got = pool.run(rank_bad_all_to_all, timeout=30)
    assert got[0] is not None and got[0][0] == ringd.EMISMATCH
    assert "rank 1 sends 1 rows to rank 3, which expects 2 from it" in got[0][1]
    assert all(g == got[0] for g in got), got
