#!/usr/bin/env python3
"""One rank of the balanced-batches benchmark (bench/balance.sh runs it on
the namespace testbed, one rank per host, through python3 -m ringd.launch).

Times training steps of an MLP (--layers square layers of --width, float32,
SGD) on global batches of --batch rows, one host (--slow-rank, the last by
default) --slowdown times slower per row than the others, in one of these
modes:

  equal       ringd.torch.DistributedOptimizer, every rank the same share of
              each global batch (ringd.balance.Balancer with every=0)
  balanced    the same with ringd.balance: shares re-agreed every --every
              steps from the ranks' measured speeds
  ddp-gloo    DistributedDataParallel over torch's gloo process group, equal
              shares (MASTER_ADDR, MASTER_PORT from the environment)

Each row costs --row-ms of emulated accelerator time (a third in forward,
two thirds in backward; slept, the CPU idle as it is while a GPU computes:
four hosts on the testbed share this machine's cores), times --slowdown on
the slow host, besides the real CPU work of the MLP. A step's time is the
slowest rank's; rank 0 prints one line of JSON with the median and
quartiles over --steps timed steps (after --warmup, which lets the balanced
split settle), the last split, and the ideal: the global batch over the
ranks' total speed (emulated, and as the balancer measured it).
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "client", "python"))


class Device(torch.autograd.Function):
    """An accelerator's time for a batch of rows, emulated by sleeping:
    forward a third of ms per row, backward two thirds."""

    @staticmethod
    def forward(ctx, x, ms):
        ctx.ms = ms * x.shape[0]
        time.sleep(ctx.ms / 3000)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        time.sleep(2 * ctx.ms / 3000)
        return grad, None


class DeviceTime(torch.nn.Module):
    def __init__(self, ms):
        super().__init__()
        self.ms = ms

    def forward(self, x):
        return Device.apply(x, self.ms)


def model_of(args, row_ms):
    """The device time sits after the first layer, where the gradient
    flows: autograd skips the backward of what only the inputs feed."""
    torch.manual_seed(0)
    layers = []
    for i in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.Tanh()]
        if i == 0:
            layers.append(DeviceTime(row_ms))
    return torch.nn.Sequential(*layers)


def quartiles(xs):
    q = statistics.quantiles(xs, n=4)
    return {"median_ms": round(statistics.median(xs), 2), "q1_ms": round(q[0], 2),
            "q3_ms": round(q[2], 2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", required=True, choices=["equal", "balanced", "ddp-gloo"])
    ap.add_argument("--slowdown", type=float, default=2.0)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--row-ms", type=float, default=1.0,
                    help="emulated accelerator time per row on a host at full speed")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--batch", type=int, default=96, help="global batch, rows")
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(1)
    steps = args.warmup + args.steps
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(steps * args.batch, args.width,
                                                      generator=g))
    result = {"mode": args.mode, "slowdown": args.slowdown, "row_ms": args.row_ms,
              "batch": args.batch, "layers": args.layers, "width": args.width}

    if args.mode == "ddp-gloo":
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        dist.init_process_group("gloo")
        rank, size = dist.get_rank(), dist.get_world_size()
    else:
        import ringd
        import ringd.balance
        import ringd.torch as rt

        c = ringd.connect()
        rank, size = c.rank, c.size
    slow = args.slow_rank % size
    row_ms = args.row_ms * (args.slowdown if rank == slow else 1)
    model = model_of(args, row_ms)
    sgd = torch.optim.SGD(model.parameters(), lr=1e-4)
    result["params"] = sum(p.numel() for p in model.parameters())

    if args.mode == "ddp-gloo":
        if args.batch % size:
            sys.exit(f"--batch {args.batch} does not split into {size} equal shares")
        share = args.batch // size
        net = DistributedDataParallel(model)
        batches = ([data.tensors[0][s * args.batch + rank * share
                                    : s * args.batch + (rank + 1) * share]]
                   for s in range(steps))
        opt = sgd

        def gather(times):
            out = [None] * size
            dist.all_gather_object(out, times)
            return out
    else:
        bal = ringd.balance.Balancer(c, args.batch, every=args.every if args.mode == "balanced"
                                     else 0)
        opt = rt.DistributedOptimizer(sgd, named_parameters=model.named_parameters(), balance=bal)
        batches = torch.utils.data.DataLoader(
            data, batch_sampler=rt.BalancedSampler(data, bal))
        net = model

        def gather(times):
            return rt.allgather_object(times)

    times = []
    t = time.perf_counter()
    for i, (x,) in enumerate(batches):
        opt.zero_grad()
        net(x).pow(2).mean().backward()
        opt.step()
        now = time.perf_counter()
        if i >= args.warmup:
            times.append((now - t) * 1000)
        t = now
    everyone = gather(times)
    slowest = [max(col) for col in zip(*everyone)]
    speeds = [1000 / (args.row_ms * (args.slowdown if r == slow else 1)) for r in range(size)]
    result.update(quartiles(slowest))
    result["ranks"] = size
    result["ideal_ms"] = round(1000 * args.batch / sum(speeds), 2)
    if args.mode != "ddp-gloo":
        result["rows"] = bal.rows
        result["rates"] = [round(r, 1) for r in bal.rates]
        if all(r > 0 for r in bal.rates):
            result["ideal_measured_ms"] = round(1000 * args.batch / sum(bal.rates), 2)
    else:
        del net  # before the process group: torch 1.13 may hang otherwise (overlap.py)
        dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
