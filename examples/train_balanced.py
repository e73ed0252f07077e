#!/usr/bin/env python3
"""Uneven machines: one host slowed, batches split by measured speed (ringd.balance).

    examples/run_balanced.sh                       # build, start a 4-host ring, train twice
    python3 examples/train_balanced.py --launch 4  # the same, once built (PYTHONPATH=client/python)

Trains the same MLP twice on the same global batches: first with equal
shares of every global batch (what DDP, Horovod and gloo do), then with
ringd.balance, which gives each rank a share proportional to its measured
speed. One rank (--slow-rank, the last by default) is --slowdown times
slower per row: each rank sleeps --per-row-ms per row of its share, as a
bigger model's compute would take, and the slow one that many times longer.
With equal shares every step waits for it; balanced, the others take more
rows and all finish together.

The gradients are combined by the weighted mean with weight = rows
(DistributedOptimizer(..., balance=)), which is exactly the global batch's
mean gradient, so both runs train the same model: rank 0 prints the final
weights of both, which differ only by the order of the additions (float64:
around 1e-16), the median step time of each against the ideal (total rows
over the ranks' total speed), and the daemon's view of the split (ringctl
status). Exits with status 1 if the replicas differ or the runs disagree.
"""

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

try:
    import ringd
except ImportError:  # run from a checkout without PYTHONPATH
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "client", "python"))
    import ringd
import ringd.balance
import ringd.torch as rt

# Between the two runs, per weight: the same training added in another order.
TOLERANCE = {"float64": 1e-9, "float32": 1e-3}


def make_data(seed, samples, features, classes, dtype):
    """Inputs and labels, the same in every process for the same seed."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=g)
    w1 = torch.randn(features, 32, generator=g)
    w2 = torch.randn(32, classes, generator=g)
    logits = torch.tanh(x @ w1) @ w2 + 0.5 * torch.randn(samples, classes, generator=g)
    return x.to(dtype), logits.argmax(dim=1)


def make_model(seed, features, classes, dtype):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(features, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
        torch.nn.Linear(64, classes),
    ).to(dtype)


def train(args, c, data, every):
    """One run: returns (weights, step times, balancer)."""
    model = make_model(args.seed, args.features, args.classes, getattr(torch, args.dtype))
    rt.broadcast_parameters(model, root_rank=0)
    bal = ringd.balance.Balancer(c, args.batch, every=every)
    opt = rt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9),
                                  named_parameters=model.named_parameters(), balance=bal)
    sampler = rt.BalancedSampler(data, bal, shuffle=True, seed=args.seed)
    loader = torch.utils.data.DataLoader(data, batch_sampler=sampler)  # num_workers=0
    slow = args.slow_rank % c.size
    per_row = args.per_row_ms / 1000 * (args.slowdown if c.rank == slow else 1)
    loss_fn = torch.nn.CrossEntropyLoss()  # the mean over this rank's rows
    times = []
    c.barrier()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        t = time.perf_counter()
        for x, y in loader:
            time.sleep(per_row * len(x))  # the compute of a bigger model
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            now = time.perf_counter()
            times.append(now - t)
            t = now
    w = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()
    return w, times, bal


def ringctl():
    """The ringctl next to the ringd in use, or on PATH."""
    near = os.environ.get("RINGD_BIN")
    if near:
        path = os.path.join(os.path.dirname(os.path.dirname(near)), "client", "ringctl")
        if os.path.exists(path):
            return path
    return shutil.which("ringctl")


def worker(args):
    torch.set_num_threads(1)
    c = ringd.init()  # $RINGD_SOCKET, set by ringd.launch
    data = torch.utils.data.TensorDataset(
        *make_data(args.seed, args.samples, args.features, args.classes,
                   getattr(torch, args.dtype)))
    runs = {}
    for name, every in [("equal shares", 0), ("balanced", args.every)]:
        runs[name] = train(args, c, data, every)

    ok = True
    # Every replica's weights, compared bit for bit, in both runs.
    same = {}
    for name, (w, _, _) in runs.items():
        everyone = c.allgather(w).view(np.uint8).reshape(c.size, -1)
        same[name] = all(np.array_equal(everyone[0], everyone[r]) for r in range(c.size))
    if c.rank == 0:
        # Steps after the split has settled (three re-splits), or the later
        # half of a short run.
        settle = min(3 * args.every + 1, len(runs["balanced"][1]) // 2)
        print(f"\n{c.size} ranks, rank {args.slow_rank % c.size} {args.slowdown:g} times slower "
              f"per row ({args.per_row_ms:g} ms per row elsewhere), global batch {args.batch}")
        medians = {}
        for name, (w, times, bal) in runs.items():
            t = statistics.median(times[settle:] if name == "balanced" else times[1:])
            medians[name] = t
            digest = hashlib.sha256(w.tobytes()).hexdigest()[:16]
            print(f"  {name:13s} step {1000 * t:7.1f} ms (median), rows per rank "
                  f"{'/'.join(map(str, bal.rows))}, {bal.resplits} re-splits; weights sha256 "
                  f"{digest}..., replicas {'bit-identical' if same[name] else 'DIFFER'}")
            ok &= same[name]
        bal = runs["balanced"][2]
        ideal = args.batch / sum(bal.rates)
        print(f"  ideal         step {1000 * ideal:7.1f} ms of compute: {args.batch} rows over "
              f"{sum(bal.rates):.0f} rows/s, the ranks' measured speeds together")
        print(f"  balanced / equal {medians['balanced'] / medians['equal shares']:.2f}, "
              f"balanced / ideal {medians['balanced'] / ideal:.2f}")
        dw = np.abs(runs["balanced"][0] - runs["equal shares"][0]).max()
        tol = TOLERANCE[args.dtype]
        print(f"  max |weight difference| between the runs {dw:.2e} ({args.dtype}: the same "
              f"global batches, added in another order; tolerance {tol:g})")
        ok &= bool(dw <= tol)
        tool = ringctl()
        if tool:
            print(f"\nringctl status on rank 0's host, the balanced batches:")
            out = subprocess.run([tool, "status"], capture_output=True, text=True).stdout
            lines = out.splitlines()
            at = next((i for i, l in enumerate(lines) if l.startswith("balanced batches")), None)
            print("\n".join(lines[at:]) if at is not None else out)
        print("OK" if ok else "FAILED")
    c.close()
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--launch", type=int, metavar="N",
                    help="start a ring of N daemons on 127.0.0.1 and N copies of this script")
    ap.add_argument("--slow-rank", type=int, default=-1, help="the slowed rank (-1: the last)")
    ap.add_argument("--slowdown", type=float, default=2.0,
                    help="how many times slower per row the slowed rank is (2)")
    ap.add_argument("--per-row-ms", type=float, default=0.5,
                    help="compute per row on the other ranks, slept (0.5)")
    ap.add_argument("--every", type=int, default=5, help="steps between re-splits (5)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=192, help="global batch size")
    ap.add_argument("--samples", type=int, default=3072)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=sorted(TOLERANCE), default="float64")
    args = ap.parse_args()
    if args.launch:
        from ringd import launch

        cmd = [sys.executable, os.path.abspath(__file__)]
        cmd += [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
                if k != "launch" and v is not None]
        print(f"Starting {args.launch} ringd daemons on 127.0.0.1 and {args.launch} training "
              "processes", flush=True)
        return launch.run(cmd, hosts=args.launch)
    if not os.environ.get("RINGD_SOCKET"):
        sys.exit("RINGD_SOCKET is not set: start with --launch 4, or under python3 -m ringd.launch")
    return worker(args)


if __name__ == "__main__":
    sys.exit(main())
