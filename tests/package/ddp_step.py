"""One step of DistributedDataParallel with init_process_group("ringd"), as
a training script takes it, for the packages' tests (test_deb.py: the
packages unpacked here; test_container.py: installed in two containers).

Rank r's input is r + 1 in every element, so the averaged gradient of
sum(W x + b) over its 3 rows is 3 (N + 1) / 2 for every weight and 3 for
every bias, on each of the N ranks (exact in float32). Prints
"rank R of N: ok, extension PATH" (the backend's C++ half it loaded).
"""
import torch
import torch.distributed as dist
from ringd.torch import _distributed

dist.init_process_group("ringd")
rank, n = dist.get_rank(), dist.get_world_size()
torch.manual_seed(rank)  # different weights: DDP makes them rank 0's
model = torch.nn.Linear(4, 2)
ddp = torch.nn.parallel.DistributedDataParallel(model)
ddp(torch.full((3, 4), float(rank + 1))).sum().backward()
assert torch.equal(model.weight.grad, torch.full((2, 4), 3 * (n + 1) / 2)), model.weight.grad
assert torch.equal(model.bias.grad, torch.full((2,), 3.0)), model.bias.grad
weights = [torch.zeros_like(model.weight) for _ in range(n)]
dist.all_gather(weights, model.weight.detach())
assert all(torch.equal(w, weights[0]) for w in weights)
print("rank %d of %d: ok, extension %s" % (rank, n, _distributed._extension().__file__),
      flush=True)
dist.destroy_process_group()
