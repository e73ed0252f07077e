"""PyTorch's side of ringd.balance: a batch sampler that hands each rank its
rows of every global batch, and a DistributedDataParallel communication
hook that combines the gradients by their rows. DistributedOptimizer takes
balance= itself (_optimizer.py).

    bal = ringd.balance.Balancer(conn, global_batch=256, every=10)
    loader = DataLoader(data, batch_sampler=rt.BalancedSampler(data, bal, shuffle=True))
    opt = rt.DistributedOptimizer(opt, named_parameters=model.named_parameters(), balance=bal)
    for x, y in loader:              # the sampler calls bal.slice() for each step
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()                   # bal.done(), then the weighted mean of the gradients
"""

import torch

from . import _ops
from ._tensors import conn_of


class BalancedSampler(torch.utils.data.Sampler):
    """A batch sampler (DataLoader(data, batch_sampler=...)) that cuts the
    dataset into global batches of balancer.global_batch indices, the same
    on every rank, and yields this rank's rows of each: the indices
    [lo, hi) of balancer.slice(), asked for when the DataLoader asks for the
    step's batch (so the rank's clock starts with the loading of its rows).

    data: a dataset (its len()) or a number of rows. shuffle: a new order
    each epoch from seed + epoch (set_epoch(), as DistributedSampler),
    the same on every rank; else the dataset's order. The last global batch,
    if partial, is left out (as drop_last=True), so every step has exactly
    global_batch rows. Use it with num_workers=0: workers fetch batches
    ahead of the steps, which would start their clocks too early."""

    def __init__(self, data, balancer, *, shuffle=False, seed=0):
        self.n = data if isinstance(data, int) else len(data)
        self.balancer = balancer
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.epoch = 0
        if self.n < balancer.global_batch:
            raise ValueError(
                f"BalancedSampler: {self.n} rows do not make one global batch of "
                f"{balancer.global_batch}"
            )

    def set_epoch(self, epoch):
        self.epoch = int(epoch)

    def __len__(self):
        return self.n // self.balancer.global_batch

    def __iter__(self):
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.n, generator=g)
        else:
            order = torch.arange(self.n)
        size = self.balancer.global_batch
        for b in range(len(self)):
            lo, hi = self.balancer.slice()
            yield order[b * size + lo : b * size + hi].tolist()


def balanced_allreduce_hook(balancer, bucket):
    """A DistributedDataParallel communication hook that averages the
    bucket's gradients over the ringd ring weighted by each rank's rows of
    the step, and stops the balancer's clock when the last bucket is ready
    (the end of the rank's backward pass):

        model = DistributedDataParallel(net, process_group=pg)
        model.register_comm_hook(bal, ringd.torch.balanced_allreduce_hook)

    The allreduce runs while backward goes on; the returned future completes
    with it."""
    t = bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()
    if bucket.is_last():
        balancer.done()
    req = _ops.allreduce_async_(t, op="wmean", weight=balancer.weight,
                                conn=conn_of(balancer.conn), name=f"ddp bucket {bucket.index()}")
    fut = torch.futures.Future()

    def finish(r):
        err = r.exception()
        if err is not None:
            fut.set_exception(err)
        else:
            fut.set_result(t)

    req.add_done_callback(finish)
    return fut
