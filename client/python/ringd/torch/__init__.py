"""PyTorch over ringd (CPU tensors): a torch.distributed backend, and
Horovod's API for those who write that.

With torch.distributed, DistributedDataParallel included, one line changes:

    import ringd.torch                                  # registers "ringd"
    import torch.distributed as dist
    dist.init_process_group("ringd")                    # rank, world size from the daemon
    model = torch.nn.parallel.DistributedDataParallel(model)

Horovod-style (names as in horovod.torch):

    import ringd.torch as hvd

    hvd.init()                                          # the process's ringd connection
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1 * hvd.size()),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for x, y in shard:
        opt.zero_grad()
        loss_fn(model(x), y).backward()                 # buckets reduced as they are ready
        opt.step()                                      # with the averaged gradients

Uneven machines (ringd.balance): BalancedSampler gives each rank a share
of every global batch proportional to its speed, and
DistributedOptimizer(..., balance=) or balanced_allreduce_hook (for
DistributedDataParallel) combines the gradients weighted by rows, which is
exactly the global batch's mean gradient.

A process is one rank, with one connection to its host's daemon
(ringd.connect()); every function here, and the backend, use it, made on
first use from $RINGD_SOCKET, or the one given as conn=. Collectives on
tensors check once that every rank passes the same shapes and dtypes, and
otherwise fail on every rank with RingError(EMISMATCH) naming the tensor.

Element types: float32, float64, float16, bfloat16, int8, uint8, int32,
int64 for reductions; any dtype for broadcasts and gathers. Non-contiguous
tensors go through a contiguous copy. Start the processes with
python3 -m ringd.launch (one host, or several through ssh).
"""

from .. import _core
from . import _distributed
from ._ops import (
    FUSION_BYTES,
    allgather,
    allgather_object,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    allreduce_hook,
    broadcast,
    broadcast_,
    broadcast_async_,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
    poll,
    synchronize,
)
from ._balance import BalancedSampler, balanced_allreduce_hook
from ._optimizer import BUCKET_BYTES, DistributedOptimizer
from ._tensors import dtype_code, empty

# Horovod's op constants, as ringd's op names.
Average = "mean"
Sum = "sum"
Min = "min"
Max = "max"
Product = "prod"


def init(path=None):
    """Connects this process to its host's ringd daemon (ringd.connect(path))
    and returns the connection; calling it again returns the same one."""
    return _core.connect(path)


def shutdown():
    """Closes the process's connection (the next call connects again)."""
    conn = _core._shared_connection()
    if conn is not None:
        conn.close()


def is_initialized():
    """True while the process has an open ringd connection."""
    return _core._shared_connection() is not None


def rank():
    """This process's rank, in [0, size())."""
    return _core.connect().rank


def size():
    """The number of ranks: the processes of every host of the ring."""
    return _core.connect().size


def local_rank():
    """This process's rank among those of its host."""
    return _core.connect().local_rank


def local_size():
    """The number of processes on this host."""
    return _core.connect().local_size


_distributed.register()

__all__ = [
    "Average",
    "BUCKET_BYTES",
    "BalancedSampler",
    "DistributedOptimizer",
    "FUSION_BYTES",
    "Max",
    "Min",
    "Product",
    "Sum",
    "allgather",
    "allgather_object",
    "allreduce",
    "allreduce_",
    "allreduce_async",
    "allreduce_async_",
    "allreduce_hook",
    "balanced_allreduce_hook",
    "broadcast",
    "broadcast_",
    "broadcast_async_",
    "broadcast_object",
    "broadcast_optimizer_state",
    "broadcast_parameters",
    "dtype_code",
    "empty",
    "init",
    "is_initialized",
    "local_rank",
    "local_size",
    "poll",
    "rank",
    "shutdown",
    "size",
    "synchronize",
]
