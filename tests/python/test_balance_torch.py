"""ringd.balance with PyTorch, 3 ranks on a ring of 3 real daemons, rank 2
twice as slow per row: a DataLoader over ringd.torch.BalancedSampler hands
each rank its rows of every global batch, and DistributedOptimizer(...,
balance=) or DistributedDataParallel with balanced_allreduce_hook combines
the gradients by rows; either trains like one process on the whole global
batches (training.py's model and data), while the split moves rows away
from the slow rank; and examples/train_balanced.py, on 4 hosts, checks
itself.
"""

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import import_torch, pool_holder, running_ring

torch = import_torch()

import ringd.torch as rt  # noqa: E402
from ringd import balance  # noqa: E402
from training import TOLERANCE, flat_weights, make_data, make_model  # noqa: E402

GLOBAL_BATCH = 48
EPOCHS = 2
DELAY = 0.001  # per row; twice that on rank 2
EVERY = 2


@pytest.fixture(scope="module")
def pools3():
    with running_ring(hosts=3, config="collective_timeout: 20s\n") as r, pool_holder(r) as h:
        yield h


def train(wrap=None, rank=None, bal=None):
    """SGD with momentum over EPOCHS epochs of shuffled global batches: as
    a rank of a balanced job (wrap, rank, bal), or alone on whole batches."""
    torch.set_num_threads(1)
    x, y = make_data(torch.float64)
    data = torch.utils.data.TensorDataset(x, y)
    model = make_model("float64")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    if bal is None:
        for epoch in range(EPOCHS):
            order = torch.randperm(len(data), generator=torch.Generator().manual_seed(1 + epoch))
            for b in range(len(data) // GLOBAL_BATCH):
                idx = order[b * GLOBAL_BATCH : (b + 1) * GLOBAL_BATCH]
                opt.zero_grad()
                loss_fn(model(x[idx]), y[idx]).backward()
                opt.step()
        return flat_weights(model)
    model, opt = wrap(model, opt)
    sampler = rt.BalancedSampler(data, bal, shuffle=True, seed=1)
    loader = torch.utils.data.DataLoader(data, batch_sampler=sampler)
    per_row = DELAY * (2 if rank == 2 else 1)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            time.sleep(per_row * len(xb))
            opt.zero_grad()
            loss_fn(model(xb), yb).backward()
            opt.step()
    return flat_weights(model)


def rank_optimizer(c):
    bal = balance.Balancer(c, GLOBAL_BATCH, every=EVERY)

    def wrap(model, opt):
        rt.broadcast_parameters(model, conn=c)
        return model, rt.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                              balance=bal)

    return train(wrap, c.rank, bal), list(bal.history)


def rank_ddp(c, store):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    bal = balance.Balancer(c, GLOBAL_BATCH, every=EVERY)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=c.rank,
                            world_size=c.size)
    try:
        def wrap(model, opt):
            ddp = DistributedDataParallel(model, bucket_cap_mb=0.001)  # several buckets
            ddp.register_comm_hook(bal, rt.balanced_allreduce_hook)
            return ddp, opt

        return train(wrap, c.rank, bal), list(bal.history)
    finally:
        dist.destroy_process_group()


def check(results):
    alone = train()
    weights = [w for w, _ in results]
    for w in weights[1:]:
        assert w.tobytes() == weights[0].tobytes(), "replicas differ"
    assert np.abs(weights[0] - alone).max() <= TOLERANCE["float64"]
    hist = results[0][1]
    assert all(h == hist for _, h in results), "the ranks split differently"
    last = hist[-1][1]
    assert sum(last) == GLOBAL_BATCH and last[2] < last[0] and last[2] < last[1], hist


def test_distributed_optimizer_with_balance_trains_like_one_process(pools3):
    check(pools3.get().run(rank_optimizer, timeout=120))


def test_ddp_with_the_balanced_hook_trains_like_one_process(pools3, tmp_path):
    check(pools3.get().run(rank_ddp, str(tmp_path / "store"), timeout=120))


def test_the_example_trains_the_same_weights_balanced_or_not(tmp_path):
    here = os.path.dirname(os.path.abspath(__file__))
    source = os.path.join(here, "..", "..")
    env = dict(os.environ, PYTHONPATH=os.path.join(source, "client", "python"),
               PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, os.path.join(source, "examples", "train_balanced.py"),
                        "--launch", "4", "--epochs", "2", "--samples", "1536"],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("replicas bit-identical") == 2, r.stdout
    assert "max |weight difference| between the runs" in r.stdout
    assert r.stdout.rstrip().endswith("OK"), r.stdout
