"""ringd.torch's Horovod-style API, 4 ranks on a ring of 4 real daemons:
collectives on tensors, the shape checks, broadcasts of parameters,
optimizer state and objects, DistributedOptimizer (overlapped with the
backward pass or not, accumulating passes) against single-process training
(see training.py), and the DistributedDataParallel communication hook.
"""

import numpy as np
import pytest
from conftest import import_torch

torch = import_torch()

import ringd  # noqa: E402
import ringd.torch as rt  # noqa: E402
from training import TOLERANCE, flat_weights, make_model, train  # noqa: E402

# ---- scenarios (run in the rank processes) ----


def rank_allreduce_(c, dtype, strided, op):
    t = torch.arange(24, dtype=torch.float64).reshape(4, 6) / 4 * (c.rank + 1)
    t = t.to(getattr(torch, dtype))
    target = t[:, ::2] if strided else t
    out = rt.allreduce_(target, op=op, conn=c)
    assert out is target
    return t.to(torch.float64).numpy()


def rank_allreduce_parameter(c):
    p = torch.nn.Parameter(torch.ones(3, 4) * (c.rank + 1))
    rt.allreduce_(p, op="sum", conn=c)
    rt.allreduce_(p.t(), op="max", conn=c)  # a transposed (non-contiguous) view
    return p.detach().numpy().copy(), p.requires_grad


def rank_weighted(c):
    t = torch.full((5,), float(c.rank), dtype=torch.float32)
    rt.allreduce_(t, op="wmean", weight=c.rank + 1, conn=c)
    return t[0].item()


def rank_shared_tensor(c):
    t = rt.empty((3, 5), torch.bfloat16, conn=c)
    t.fill_(c.rank + 1)
    rt.allreduce_(t, op="sum", conn=c)
    g = rt.allgather(torch.tensor([c.rank + 0.5], dtype=torch.bfloat16), conn=c)
    return t.float().numpy(), g.float().numpy()


def rank_torch_errors(c):
    out = {}
    for label, call in [
        ("int16", lambda: rt.allreduce_(torch.ones(2, dtype=torch.int16), conn=c)),
        ("list", lambda: rt.allreduce_([1.0], conn=c)),
        ("mean_int", lambda: rt.allreduce_(torch.ones(2, dtype=torch.int32), conn=c)),
    ]:
        try:
            call()
            out[label] = None
        except ringd.RingError as e:
            out[label] = (type(e).__name__, e.code, e.message)
        except Exception as e:  # noqa: BLE001
            out[label] = type(e).__name__
    return out


def rank_broadcast_parameters(c, fusion_bytes):
    torch.manual_seed(100 + c.rank)  # every rank starts different
    net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 2))
    net(torch.randn(8, 6))  # moves the BatchNorm statistics, also per rank
    extra = {"w": torch.randn(4, 4).t(), "mask": torch.rand(7) > 0.5}  # strided, bool
    before = {k: v.clone() for k, v in list(net.state_dict().items()) + list(extra.items())}
    rt.broadcast_parameters(net, root=1, conn=c, fusion_bytes=fusion_bytes)
    rt.broadcast_parameters(extra, root=1, conn=c)
    after = {k: v.clone() for k, v in list(net.state_dict().items()) + list(extra.items())}
    return ({k: v.numpy() for k, v in before.items()}, {k: v.numpy() for k, v in after.items()})


def rank_train(c, dtype, fusion_bytes=rt.FUSION_BYTES):
    def wrap(model, opt):
        rt.broadcast_parameters(model, root=0, conn=c)
        return model, rt.DistributedOptimizer(
            opt, named_parameters=model.named_parameters(), conn=c, fusion_bytes=fusion_bytes
        )

    # Each rank starts from different weights: the broadcast makes them equal.
    return train(dtype, rank=c.rank, size=c.size, wrap=wrap, model_seed=3 if c.rank == 0 else 9)


def rank_unused_parameters(c):
    torch.manual_seed(0)
    a, b = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1)
    params = list(a.parameters()) + list(b.parameters())
    opt = rt.DistributedOptimizer(torch.optim.SGD(params, lr=1.0), conn=c)
    x = torch.ones(2, 3) * (c.rank + 1)
    head = a if c.rank % 2 == 0 else b  # b has no gradient on even ranks, a none on odd
    opt.zero_grad()
    head(x).sum().backward()
    opt.step()
    return torch.cat([p.detach().reshape(-1) for p in params]).numpy().copy()


def rank_optimizer_is_still_the_optimizer(c):
    model = torch.nn.Linear(2, 2)
    base = torch.optim.Adam(model.parameters(), lr=0.01)
    opt = rt.DistributedOptimizer(base, named_parameters=model.named_parameters(), conn=c)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    sched.step()
    errors = []
    try:
        rt.DistributedOptimizer(base, named_parameters=[("only", model.weight)], conn=c)
    except ValueError as e:
        errors.append(str(e))
    n_state = len(opt.state_dict()["state"])
    return isinstance(opt, torch.optim.Adam), opt.param_groups[0]["lr"], n_state, errors


class FakeBucket:
    """What a DDP communication hook is given: a flat buffer of gradients."""

    def __init__(self, tensor, index=0):
        self._t = tensor
        self._index = index

    def buffer(self):
        return self._t

    def index(self):
        return self._index


def rank_hook_directly(c):
    bucket = FakeBucket(torch.arange(6, dtype=torch.float32) * (c.rank + 1))
    fut = rt.allreduce_hook(c, bucket)
    return fut.wait().numpy().copy()


def rank_ddp(c, store, dtype):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=c.rank,
                            world_size=c.size)
    try:
        def wrap(model, opt):
            ddp = DistributedDataParallel(model)
            ddp.register_comm_hook(c, rt.allreduce_hook)
            return ddp, opt

        return train(dtype, rank=c.rank, size=c.size, wrap=wrap, steps=10)
    finally:
        dist.destroy_process_group()


# ---- tests ----


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("strided", [False, True])
def test_allreduce_mean_of_tensors_in_place(pool, dtype, strided):
    base = np.arange(24, dtype=np.float64).reshape(4, 6) / 4
    want = base * (1 + 2 + 3 + 4) / 4
    for r, got in enumerate(pool.run(rank_allreduce_, dtype, strided, "mean")):
        if strided:
            mine = base * (r + 1)
            mine[:, ::2] = want[:, ::2]
            np.testing.assert_array_equal(got, mine)
        else:
            np.testing.assert_array_equal(got, want)


def test_parameters_that_require_grad_reduce_in_place(pool):
    for p, requires_grad in pool.run(rank_allreduce_parameter):
        np.testing.assert_array_equal(p, np.full((3, 4), 10.0))
        assert requires_grad


def test_weighted_mean(pool):
    want = sum(r * (r + 1) for r in range(4)) / sum(r + 1 for r in range(4))
    for got in pool.run(rank_weighted):
        assert got == pytest.approx(want, rel=1e-6)


def test_shared_bfloat16_tensors_and_allgather(pool):
    for t, g in pool.run(rank_shared_tensor):
        np.testing.assert_array_equal(t, np.full((3, 5), 10.0))
        np.testing.assert_array_equal(g[:, 0], np.arange(4) + 0.5)


def test_bad_tensors_raise(pool):
    for out in pool.run(rank_torch_errors):
        assert out["int16"] == "TypeError" and out["list"] == "TypeError"
        name, code, message = out["mean_int"]
        assert code == ringd.EINVAL and "int32" in message


@pytest.mark.parametrize("fusion_bytes", [rt.FUSION_BYTES, 64])
def test_broadcast_parameters_makes_every_rank_equal_to_the_root(pool, fusion_bytes):
    results = pool.run(rank_broadcast_parameters, fusion_bytes)
    root_before = results[1][0]
    assert any(not np.array_equal(results[0][0][k], root_before[k]) for k in root_before)
    for before, after in results:
        for k in root_before:
            assert after[k].tobytes() == root_before[k].tobytes(), k


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("fusion_bytes", [rt.FUSION_BYTES, 256])
def test_four_ranks_train_like_one_process_on_the_full_batch(pool, dtype, fusion_bytes):
    weights = pool.run(rank_train, dtype, fusion_bytes)
    for w in weights[1:]:
        assert w.tobytes() == weights[0].tobytes(), "replicas differ"
    ref = train(dtype)
    assert np.abs(weights[0] - ref).max() <= TOLERANCE[dtype]
    assert np.abs(ref - flat_weights(make_model(dtype))).max() > 1e-3  # it did train


def test_parameters_without_gradient_on_some_ranks_stay_in_step(pool):
    got = pool.run(rank_unused_parameters)
    for w in got[1:]:
        assert w.tobytes() == got[0].tobytes()


def test_the_wrapped_optimizer_keeps_its_class_state_and_scheduler(pool):
    for is_adam, lr, n_state, errors in pool.run(rank_optimizer_is_still_the_optimizer):
        assert is_adam and lr == pytest.approx(0.005) and n_state == 2
        assert errors and "missing from named_parameters" in errors[0]


def test_allreduce_hook_averages_a_bucket(pool):
    for got in pool.run(rank_hook_directly):
        np.testing.assert_array_equal(got, np.arange(6) * 2.5)


def test_distributed_data_parallel_with_the_ringd_hook(pool, tmp_path):
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("this torch has no gloo process group")
    store = tmp_path / "store"
    weights = pool.run(rank_ddp, str(store), "float64")
    for w in weights[1:]:
        assert w.tobytes() == weights[0].tobytes()
    assert np.abs(weights[0] - train("float64", steps=10)).max() <= TOLERANCE["float64"]


# ---- Horovod's names ----------------------------------------------------------------


def rank_horovod_calls(c):
    """What a Horovod user writes, without conn= anywhere."""
    import ringd.torch as hvd

    assert hvd.init() is c and hvd.is_initialized()
    out = {"ids": (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size())}
    torch.manual_seed(c.rank)
    model = torch.nn.Linear(3, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=2)
    out["weight"] = model.weight.detach().numpy().copy()
    t = torch.full((4,), float(c.rank))
    out["mean"] = hvd.allreduce(t, op=hvd.Average).tolist()  # a new tensor
    out["untouched"] = t.tolist()
    h = hvd.allreduce_async_(t, op=hvd.Sum, name="t")
    out["sum"] = hvd.synchronize(h).tolist()
    out["polled"] = hvd.poll(h)
    out["bcast"] = hvd.broadcast(torch.tensor([c.rank]), root_rank=3).tolist()
    out["object"] = hvd.broadcast_object({"epoch": 7, "rank": c.rank}, root_rank=1)
    out["objects"] = hvd.allgather_object(("r", c.rank))
    return out


def test_horovod_style_calls_use_the_process_connection(pool):
    for r, out in enumerate(pool.run(rank_horovod_calls)):
        assert out["ids"] == (r, 4, 0, 1)
        assert out["mean"] == [1.5] * 4 and out["untouched"] == [float(r)] * 4
        assert out["sum"] == [6.0] * 4 and out["polled"]
        assert out["bcast"] == [3]
        assert out["object"] == {"epoch": 7, "rank": 1}
        assert out["objects"] == [("r", k) for k in range(4)]
    weights = [out["weight"] for out in pool.run(rank_horovod_calls)]
    for w in weights:
        assert w.tobytes() == weights[0].tobytes()


def rank_optimizer_state(c):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (c.rank + 1))
    if c.rank == 0:  # only the root has taken steps: the others' state is empty
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(5, 4)).pow(2).sum().backward()
            opt.step()
    rt.broadcast_optimizer_state(opt, root_rank=0, conn=c)
    state = opt.state_dict()
    flat = {f"{i}.{k}": v.numpy().copy() if torch.is_tensor(v) else v
            for i, s in state["state"].items() for k, v in s.items()}
    return state["param_groups"][0]["lr"], flat


def test_broadcast_optimizer_state_fills_empty_states_with_the_roots(pool):
    results = pool.run(rank_optimizer_state)
    lr0, state0 = results[0]
    assert lr0 == pytest.approx(0.01) and len(state0) == 6  # step, exp_avg, exp_avg_sq x 2
    for lr, state in results[1:]:
        assert lr == lr0 and state.keys() == state0.keys()
        for k in state0:
            assert np.array_equal(state[k], state0[k]), k


def rank_wrong_arguments(c):
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        rt.broadcast_parameters(opt.state_dict(), root_rank=0, conn=c)
    except TypeError as e:
        return str(e)
    return None


def test_broadcast_parameters_of_an_optimizer_says_what_to_call(pool):
    for message in pool.run(rank_wrong_arguments):
        assert "broadcast_optimizer_state" in message


# ---- shapes checked in tensor terms ---------------------------------------------------


def rank_same_size_other_shape(c):
    t = torch.ones((2, 6) if c.rank == 1 else (3, 4))
    try:
        rt.allreduce_(t, name="x", conn=c)
    except ringd.RingError as e:
        return e.code, e.message
    return None


def test_tensors_of_equal_size_but_other_shapes_fail_on_every_rank(pool):
    for got in pool.run(rank_same_size_other_shape):
        assert got == (ringd.EMISMATCH, "allreduce: x: rank 1 has (2, 6) float32, rank 0 has (3, 4)")


def rank_model_differs(c, where):
    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("fc1", torch.nn.Linear(20, 33 if c.rank == 2 else 32))
    model.add_module("fc2", torch.nn.Linear(33 if c.rank == 2 else 32, 2))
    try:
        if where == "optimizer":
            opt = rt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                          named_parameters=model.named_parameters(), conn=c)
            model(torch.randn(4, 20)).sum().backward()
            opt.step()
        else:
            rt.broadcast_parameters(model, root_rank=0, conn=c)
    except ringd.RingError as e:
        return e.code, e.message
    return None


@pytest.mark.parametrize("where", ["optimizer", "broadcast_parameters"])
def test_a_layer_of_another_shape_on_one_rank_is_named_on_every_rank(pool, where):
    results = pool.run(rank_model_differs, where)
    assert results[0] and all(r == results[0] for r in results)
    code, message = results[0]
    assert code == ringd.EMISMATCH
    assert "rank 2 has (33, 20) float32, rank 0 has (32, 20)" in message, message
    assert "fc1.weight" in message


# ---- DistributedOptimizer: overlap, accumulation ---------------------------------------


def rank_train_overlap(c, overlap, passes=1):
    """Trains with 2 KiB buckets; returns the weights, and how many buckets
    were on the ring before step() at the first step."""
    seen = []

    def wrap(model, opt):
        rt.broadcast_parameters(model, root_rank=0, conn=c)
        opt = rt.DistributedOptimizer(opt, named_parameters=model.named_parameters(), conn=c,
                                      bucket_bytes=2048, overlap=overlap,
                                      backward_passes_per_step=passes)
        step = opt.step

        def spying_step(*args):
            if not seen:
                seen.append(opt._ringd_layout.next if opt._ringd_layout else 0)
            return step(*args)

        opt.step = spying_step
        return model, opt

    if passes == 1:
        w = train("float32", rank=c.rank, size=c.size, wrap=wrap, steps=8)
    else:
        w = train_accumulating(c, wrap, passes)
    return w, seen[0], len(rt._optimizer._Layout(
        [p for p in make_model("float32").parameters()], {}, 2048).buckets)


def train_accumulating(c, wrap, passes):
    """Each step on `passes` half-shards, one backward pass each."""
    from training import BATCH, make_data

    torch.manual_seed(0)
    x, y = make_data(torch.float32)
    model = make_model("float32")
    model, opt = wrap(model, torch.optim.SGD(model.parameters(), lr=0.1))
    loss_fn = torch.nn.CrossEntropyLoss()
    shard = BATCH // c.size
    for s in range(6):
        idx = (torch.arange(s * BATCH, (s + 1) * BATCH) % x.shape[0])[c.rank * shard:]
        opt.zero_grad()
        for part in idx[:shard].chunk(passes):
            loss_fn(model(x[part]), y[part]).backward()
        opt.step()
    return flat_weights(model)


@pytest.mark.parametrize("passes", [1, 2])
def test_overlapped_buckets_give_the_bits_of_reducing_in_step(pool, passes):
    overlapped = pool.run(rank_train_overlap, True, passes)
    in_step = pool.run(rank_train_overlap, False, passes)
    for (w, early, buckets), (w2, early2, _) in zip(overlapped, in_step):
        assert w.tobytes() == overlapped[0][0].tobytes(), "replicas differ"
        assert w.tobytes() == w2.tobytes(), "overlap changed the result"
        assert buckets >= 3
        assert early == buckets, "the buckets were not all submitted during backward"
        assert early2 == 0


def rank_misuse(c):
    model = torch.nn.Linear(3, 3)
    opt = rt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  named_parameters=model.named_parameters(), conn=c)
    out = []
    model(torch.ones(1, 3)).sum().backward()
    try:
        opt.zero_grad()
    except RuntimeError as e:
        out.append(str(e))
    try:
        model(torch.ones(1, 3)).sum().backward()  # a second pass with 1 per step
    except RuntimeError as e:
        out.append(str(e))
    opt.step()
    return out


def test_optimizer_misuse_is_explained(pool):
    for zero_grad, twice in pool.run(rank_misuse):
        assert "zero_grad() between backward() and step()" in zero_grad
        assert "computed 2 times before step()" in twice and "backward_passes_per_step" in twice
