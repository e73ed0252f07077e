#!/usr/bin/env python3
"""Data-parallel training of a small MLP over ringd, checked against one process.

    examples/run_train.sh                       # build, start a 4-host ring, train, check
    python3 examples/train_mlp.py --launch 4    # the same, once built (PYTHONPATH=client/python)

A synthetic classification dataset (random inputs, labels from a random
"teacher" network) is generated from a fixed seed, identically in every
process. Each step takes a global batch of --batch samples from an epoch's
permutation (the same on every rank); rank r trains on its 1/size shard of
it. ringd.torch.DistributedOptimizer averages the gradients (MEAN), bucket
by bucket during the backward pass, so with equal shards every replica
takes exactly the step one process would take on the whole global batch, up
to float rounding. (The same with DistributedDataParallel and
init_process_group("ringd"): examples/train_ddp.py.)

Each epoch prints every rank's mean loss on its shards. At the end the script
shows that (1) all replicas hold bit-identical weights (gathered with
allgather and compared byte for byte) and (2) rank 0, training the same model
alone on the full batches with the same seed, gets the same loss curve and
weights within a stated tolerance (see TOLERANCE: the only differences are
the order of the additions, inside the matrix products and across the ring).
The model is float64 by default (--dtype float32 to try the usual precision).
Exits with status 1 if either check fails.

With --checkpoint-dir DIR, the ranks save a checkpoint every
--checkpoint-every steps (ringd.checkpoint: model, optimizer, random states
and progress, committed once every rank's part is on disk) and, when they
start, resume from the newest step complete on every host. --crash-at-step K
makes rank 0 die at step K, as a crashed process would; run again, the job
resumes from its last checkpoint and ends with the weights (sha256 printed)
of a run that never crashed. DIR is per host, or shared by all hosts.
"""

import argparse
import hashlib
import os
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
import ringd.checkpoint as ckpt
import ringd.torch as rt

# Agreement with the single-process run: (loss, weight) tolerances, absolute,
# per epoch and per weight. In float64 the observed differences are around
# 1e-15. In float32 they are around 1e-7 at first, but after a few hundred
# steps a rounding difference eventually flips a ReLU input that sits next to
# 0, and from then on the runs drift apart as any two float32 runs that add
# in a different order do (to ~1e-4 in the losses after 20 epochs): same
# math, different rounding.
TOLERANCE = {"float64": (1e-9, 1e-8), "float32": (1e-3, 5e-2)}


def make_data(seed, samples, features, classes, dtype=torch.float64):
    """Inputs and labels, the same in every process for the same seed."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=g)
    w1 = torch.randn(features, 32, generator=g)
    w2 = torch.randn(32, classes, generator=g)
    logits = torch.tanh(x @ w1) @ w2 + 0.5 * torch.randn(samples, classes, generator=g)
    return x.to(dtype), logits.argmax(dim=1)


def make_model(seed, features, classes, dtype=torch.float64):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(features, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, classes),
    ).to(dtype)


def batches(args, epoch):
    """Index tensors of the global batches of an epoch."""
    g = torch.Generator().manual_seed(args.seed * 1000 + epoch)
    perm = torch.randperm(args.samples, generator=g)
    steps = args.samples // args.batch
    if args.steps:
        steps = min(steps, args.steps)
    return [perm[i * args.batch : (i + 1) * args.batch] for i in range(steps)]


def train(args, x, y, rank=0, size=1, optimizer_wrapper=None, on_epoch=None, checkpoints=None):
    """Trains; rank trains on shard rank of size of every global batch.
    checkpoints: a Checkpoints to resume from and save into, or None.
    Returns (model, [mean shard loss per epoch])."""
    model = make_model(args.seed, x.shape[1], int(y.max()) + 1, x.dtype)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if optimizer_wrapper:
        model, opt = optimizer_wrapper(model, opt)
    loss_fn = torch.nn.CrossEntropyLoss()
    shard = args.batch // size
    # Where training is: all a resume needs besides the model and optimizer.
    progress = {"step": 0, "epoch": 0, "batch": 0, "loss_sum": 0.0, "curve": []}
    if checkpoints:
        progress = checkpoints.resume(model, opt) or progress
    for epoch in range(progress["epoch"], args.epochs):
        epoch_batches = batches(args, epoch)
        for i in range(progress["batch"], len(epoch_batches)):
            idx = epoch_batches[i][rank * shard : (rank + 1) * shard]
            opt.zero_grad()
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            progress["loss_sum"] += loss.item()
            progress["step"] += 1
            progress["batch"] = i + 1
            if checkpoints:
                checkpoints.after_step(progress, model, opt)
        progress["curve"].append(progress["loss_sum"] / len(epoch_batches))
        progress.update(epoch=epoch + 1, batch=0, loss_sum=0.0)
        if on_epoch:
            on_epoch(epoch, progress["curve"][-1])
    return model, progress["curve"]


class Checkpoints:
    """Saves a checkpoint every args.checkpoint_every steps into
    args.checkpoint_dir, and resumes from the newest step complete on every
    host. Also crashes rank 0 at args.crash_at_step, for the demonstration."""

    def __init__(self, args, conn):
        self.dir, self.every, self.crash_at = args.checkpoint_dir, args.checkpoint_every, \
            args.crash_at_step
        self.conn = conn
        self.resumed_at = None

    def resume(self, model, opt):
        """The progress dict of the newest checkpoint, restored into model
        and opt; None if there is none."""
        state = ckpt.load(self.dir, conn=self.conn)
        if state is None:
            return None
        progress = ckpt.restore(state, model=model, optimizer=opt)
        self.resumed_at = progress["step"]
        if self.conn.rank == 0:
            print(f"resumed from the checkpoint of step {progress['step']} (epoch "
                  f"{progress['epoch'] + 1}, batch {progress['batch']}) in {self.dir}", flush=True)
        return progress

    def after_step(self, progress, model, opt):
        step = progress["step"]
        if step % self.every == 0:
            ckpt.save(self.dir, step, ckpt.capture(model=model, optimizer=opt, progress=progress),
                      conn=self.conn)
        if step == self.crash_at and self.conn.rank == 0:
            print(f"rank {self.conn.rank}: crashing at step {step} (--crash-at-step)", flush=True)
            os._exit(3)


def flat_weights(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def worker(args):
    torch.set_num_threads(1)
    c = ringd.init()  # $RINGD_SOCKET, set by ringd.launch
    if args.batch % c.size:
        sys.exit(f"--batch {args.batch} does not split into {c.size} equal shards")
    x, y = make_data(args.seed, args.samples, args.features, args.classes,
                     getattr(torch, args.dtype))

    def distribute(model, opt):
        rt.broadcast_parameters(model, root_rank=0)
        return model, rt.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                              report=args.report)

    def report(epoch, loss):
        losses = c.allgather(np.array([loss]))[:, 0]
        if c.rank == 0:
            per_rank = " ".join(f"{v:.6f}" for v in losses)
            print(f"epoch {epoch + 1:3d}  loss per rank: {per_rank}   mean {losses.mean():.6f}",
                  flush=True)

    checkpoints = Checkpoints(args, c) if args.checkpoint_dir else None
    t0 = time.monotonic()
    model, curve = train(args, x, y, c.rank, c.size, distribute, report, checkpoints)
    elapsed = time.monotonic() - t0

    # (1) Every replica's weights, gathered and compared bit for bit.
    w = flat_weights(model)
    everyone = c.allgather(w)
    ok = True
    if c.rank == 0:
        bits = everyone.view(np.uint8).reshape(c.size, -1)
        same = all(np.array_equal(bits[0], bits[r]) for r in range(c.size))
        digest = hashlib.sha256(w.tobytes()).hexdigest()[:16]
        resumed = checkpoints and checkpoints.resumed_at
        print(f"\n{c.size} ranks trained {args.epochs} epochs in {elapsed:.1f} s"
              + (f" (resumed at step {resumed})" if resumed else ""))
        if same:
            print(f"weights: all {c.size} replicas bit-identical "
                  f"({w.size} {w.dtype} values, sha256 {digest}...)")
        else:
            diff = [int((bits[0] != bits[r]).sum()) for r in range(c.size)]
            print(f"weights: replicas DIFFER (values differing from rank 0: {diff})")
            ok = False

        # (2) The same training in one process, on the full global batches.
        # The distributed curve is the mean over ranks of the shard losses,
        # which for equal shards is the full-batch loss.
        ref_model, ref_curve = train(args, x, y)
        dist_curve = np.array(c.allreduce(np.array(curve), op="mean"))
        ref_curve = np.array(ref_curve)
        dloss = np.abs(dist_curve - ref_curve).max()
        dw = np.abs(w - flat_weights(ref_model)).max()
        print("single process, full batch, same seed:")
        print("  loss curve  " + " ".join(f"{v:.6f}" for v in ref_curve))
        print("  distributed " + " ".join(f"{v:.6f}" for v in dist_curve))
        loss_tol, weight_tol = TOLERANCE[args.dtype]
        print(f"  max |loss difference| {dloss:.2e} (tolerance {loss_tol:g}), "
              f"max |weight difference| {dw:.2e} (tolerance {weight_tol:g}, {args.dtype})")
        if dloss <= loss_tol and dw <= weight_tol:
            print("  matches: OK")
        else:
            print("  does NOT match")
            ok = False
    else:
        c.allreduce(np.array(curve), op="mean")
    c.close()
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--launch", type=int, metavar="N",
                    help="start a ring of N daemons on 127.0.0.1 and N copies of this script")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--steps", type=int, default=0, help="at most this many steps per epoch")
    ap.add_argument("--batch", type=int, default=256, help="global batch size")
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=sorted(TOLERANCE), default="float64",
                    help="of the model and data (float64)")
    ap.add_argument("--checkpoint-dir", metavar="DIR",
                    help="save checkpoints into DIR, and resume from the newest one complete "
                    "on every host")
    ap.add_argument("--checkpoint-every", type=int, default=25, metavar="N",
                    help="steps between checkpoints (25)")
    ap.add_argument("--crash-at-step", type=int, default=0, metavar="K",
                    help="rank 0 dies at step K, as a crash would (0: never)")
    ap.add_argument("--report", action="store_true",
                    help="rank 0 prints, as it exits, where the ranks spent their time "
                    "(DistributedOptimizer(report=True))")
    args = ap.parse_args()
    if args.launch:
        from ringd import launch

        cmd = [sys.executable, os.path.abspath(__file__)]
        flags = {k.replace("_", "-"): v for k, v in vars(args).items()
                 if k != "launch" and v is not None and v is not False}
        cmd += [f"--{k}" if v is True else f"--{k}={v}" for k, v in flags.items()]
        print(f"Starting {args.launch} ringd daemons on 127.0.0.1 and {args.launch} training "
              "processes", flush=True)
        return launch.run(cmd, hosts=args.launch)
    if not os.environ.get("RINGD_SOCKET"):
        sys.exit("RINGD_SOCKET is not set: start with --launch 4, or under python3 -m ringd.launch")
    return worker(args)


if __name__ == "__main__":
    sys.exit(main())
