"""ringd.torch, 4 ranks on a ring of 4 real daemons: in-place allreduce of
tensors, parameter broadcast, DistributedOptimizer against single-process
training, and the DistributedDataParallel communication hook.

Training runs compare 4 ranks, each on a quarter of every batch with
gradients averaged by ringd, with one process on the whole batches from the
same seed. Tolerance on every weight after 20 steps: 1e-12 in float64 and
1e-5 in float32 (the only difference is the order of the additions; the
model uses tanh so that no ReLU sits on a rounding edge).
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ringd  # noqa: E402
import ringd.torch as rt  # noqa: E402

TOLERANCE = {"float64": 1e-12, "float32": 1e-5}
STEPS = 20
BATCH = 64


# ---- training, the same code in the ranks and in the reference ----


def _data(dtype):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(512, 10, generator=g).to(dtype)
    y = torch.randint(0, 3, (512,), generator=g)
    return x, y


def _model(dtype, seed=3):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Linear(32, 16), torch.nn.Tanh(),
        torch.nn.Linear(16, 3),
    ).to(getattr(torch, dtype))


def _flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()


def train(dtype, steps=STEPS, rank=0, size=1, wrap=None, model_seed=3):
    """Trains with SGD + momentum; rank trains on shard rank of each batch.
    wrap(model, opt) -> (model, opt) distributes it. Returns flat weights."""
    torch.set_num_threads(1)
    x, y = _data(getattr(torch, dtype))
    model = _model(dtype, model_seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if wrap:
        model, opt = wrap(model, opt)
    loss_fn = torch.nn.CrossEntropyLoss()
    shard = BATCH // size
    for s in range(steps):
        idx = torch.arange(s * BATCH, (s + 1) * BATCH) % x.shape[0]
        idx = idx[rank * shard : (rank + 1) * shard]
        opt.zero_grad()
        loss_fn(model(x[idx]), y[idx]).backward()
        opt.step()
    return _flat(model)


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
    assert np.abs(ref - _flat(_model(dtype))).max() > 1e-3  # it did train


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
