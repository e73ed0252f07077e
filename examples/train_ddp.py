#!/usr/bin/env python3
"""DistributedDataParallel over ringd: ordinary PyTorch code, one line changed.

    python3 -m ringd.launch -n 4 -- python3 examples/train_ddp.py
    python3 -m ringd.launch --hosts node1,node2,node3 -- python3 examples/train_ddp.py

(from a checkout: PYTHONPATH=client/python, after building ringd; on a
cluster, with the ringd daemons running on every host). The only
ringd-specific lines are `import ringd.torch` and the backend's name in
init_process_group: no MASTER_ADDR, no store; each process's rank comes
from its host's daemon. At the end every rank checks that all replicas
hold the same weights.
"""

import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

try:
    import ringd.torch  # noqa: F401 - registers the "ringd" backend
except ImportError:  # run from a checkout without PYTHONPATH
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "client", "python"))
    import ringd.torch  # noqa: F401


def main():
    dist.init_process_group("ringd")  # was: dist.init_process_group("gloo") + MASTER_ADDR...
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)  # replicas start different: DDP broadcasts rank 0's weights
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(0)  # the same data everywhere; each rank its shard
    x, y = torch.randn(1024, 20, generator=g), torch.randint(0, 4, (1024,), generator=g)
    batch = 64
    for epoch in range(3):
        total, steps = torch.zeros(1), 0
        for i in range(0, len(x), batch * size):
            shard = slice(i + rank * batch, i + (rank + 1) * batch)
            xs, ys = x[shard], y[shard]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xs), ys)
            loss.backward()  # DDP averages the gradients over ringd, bucket by bucket
            opt.step()
            total += loss.detach()
            steps += 1
        total /= steps  # this rank's mean over its steps, then the mean over the ranks
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"epoch {epoch + 1}: mean loss {total.item():.4f}", flush=True)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(everyone, flat)
    same = all(torch.equal(everyone[0], w) for w in everyone)
    if rank == 0:
        print(f"{size} replicas {'identical' if same else 'DIFFER'}", flush=True)
    dist.destroy_process_group()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
