#!/usr/bin/env python3
"""One rank of the overlap benchmark (bench/overlap.sh runs it on the
namespace testbed, one rank per host, through python3 -m ringd.launch).

Times training steps (zero_grad, forward, backward, step) of an MLP of
--layers square layers of --width, batch --batch, float32, SGD, one thread
per rank, in one of these modes:

  step        ringd.torch.DistributedOptimizer(overlap=False): every bucket
              reduced in step(), after the whole backward pass
  overlap     DistributedOptimizer (the default, overlap=True): each bucket
              reduced as soon as backward has produced it
  ddp-gloo    DistributedDataParallel over torch's gloo process group
              (MASTER_ADDR, MASTER_PORT from the environment)
  ddp-ringd   DistributedDataParallel over the "ringd" backend
  calibrate   what the others are made of: steps that reduce nothing (every
              rank computing), and the allreduce of all the gradients
              alone, in DistributedOptimizer's buckets

A step's time is the slowest rank's; rank 0 prints one line of JSON with
the median and quartiles over --steps timed steps (after --warmup).
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
    """An accelerator's time, emulated: forward sleeps ms / 2, backward ms,
    the CPU idle meanwhile, as it is while a GPU computes. (Four hosts on
    the testbed share this machine's cores: real compute on them competes
    with the ring's own CPU, which a host of its own would not.)"""

    @staticmethod
    def forward(ctx, x, ms):
        ctx.ms = ms
        time.sleep(ms / 2000)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.ms / 1000)
        return grad, None


class DeviceTime(torch.nn.Module):
    def __init__(self, ms):
        super().__init__()
        self.ms = ms

    def forward(self, x):
        return Device.apply(x, self.ms) if self.ms else x


def model_of(args):
    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), DeviceTime(args.device_ms),
                   torch.nn.Tanh()]
    return torch.nn.Sequential(*layers)


def quartiles(xs):
    q = statistics.quantiles(xs, n=4)
    return {"median_ms": round(statistics.median(xs), 1), "q1_ms": round(q[0], 1),
            "q3_ms": round(q[2], 1)}


def timed_steps(args, model, opt, gather):
    """Runs warmup + steps training steps; returns the slowest rank's time
    of each timed step and of its backward pass, in ms (gather(list) ->
    every rank's lists)."""
    x = torch.randn(args.batch, args.width)
    steps, backwards = [], []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        if i >= args.warmup:
            steps.append((time.perf_counter() - t0) * 1000)
            backwards.append((t2 - t1) * 1000)
    everyone = gather([steps, backwards])
    return ([max(col) for col in zip(*(e[0] for e in everyone))],
            [max(col) for col in zip(*(e[1] for e in everyone))])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", required=True,
                    choices=["step", "overlap", "ddp-gloo", "ddp-ringd", "calibrate"])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--device-ms", type=float, default=15,
                    help="emulated accelerator time of each layer's backward (forward: half)")
    ap.add_argument("--bucket-mb", type=float, default=None,
                    help="DistributedOptimizer's bucket_bytes, in MiB (default: its own)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = model_of(args)
    sgd = torch.optim.SGD(model.parameters(), lr=1e-4)
    nparams = sum(p.numel() for p in model.parameters())
    result = {"mode": args.mode, "params": nparams, "grad_MB": round(nparams * 4 / 1e6, 2),
              "layers": args.layers, "width": args.width, "batch": args.batch,
              "device_ms": args.device_ms}

    if args.mode.startswith("ddp"):
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        import ringd.torch  # noqa: F401 - the "ringd" backend

        dist.init_process_group("gloo" if args.mode == "ddp-gloo" else "ringd")
        rank, size = dist.get_rank(), dist.get_world_size()

        def gather(times):
            out = [None] * size
            dist.all_gather_object(out, times)
            return out

        ddp = DistributedDataParallel(model)
        times, backwards = timed_steps(args, ddp, sgd, gather)
        # DDP first: its reducer holds the process group, and torch 1.13 may
        # hang destroying a process group from there at exit (gloo too).
        del ddp
        dist.destroy_process_group()
    else:
        import ringd
        import ringd.torch as rt

        c = ringd.connect()
        rank, size = c.rank, c.size
        buckets = {} if args.bucket_mb is None else {"bucket_bytes": int(args.bucket_mb * 2**20)}
        result["bucket_bytes"] = buckets.get("bucket_bytes", rt.BUCKET_BYTES)

        def gather(times):
            return rt.allgather_object(times)

        if args.mode == "calibrate":
            times, backwards = timed_steps(args, model, sgd, gather)  # nothing reduced
            result["step_without_reduction"] = quartiles(times)
            result["backward"] = quartiles(backwards)
            grads = [torch.randn_like(p) for p in model.parameters()]
            opt = rt.DistributedOptimizer(sgd, named_parameters=model.named_parameters(),
                                          overlap=False, **buckets)
            comm = []
            for i in range(args.warmup + args.steps):
                for p, g in zip(model.parameters(), grads):
                    p.grad = g.clone()
                rt.broadcast_(torch.zeros(1))  # line up the ranks
                t0 = time.perf_counter()
                opt.synchronize()
                if i >= args.warmup:
                    comm.append((time.perf_counter() - t0) * 1000)
            times = [max(col) for col in zip(*gather(comm))]
            result["allreduce_alone"] = quartiles(times)
        else:
            opt = rt.DistributedOptimizer(sgd, named_parameters=model.named_parameters(),
                                          overlap=args.mode == "overlap", **buckets)
            times, backwards = timed_steps(args, model, opt, gather)
    result["ranks"] = size
    if args.mode != "calibrate":
        result.update(quartiles(times))
        result["backward_median_ms"] = round(statistics.median(backwards), 1)
    if rank == 0:
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
