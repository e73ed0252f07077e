#!/usr/bin/env python3
"""Data-parallel training that keeps going while hosts leave and come back.

Run one process per host of an elastic ring (RINGD_SOCKET names the local
daemon; PYTHONPATH=client/python from a checkout):

    python3 examples/elastic_train.py --steps 2000 --sleep 0.01
    python3 examples/elastic_train.py --torch          # the same with a torch model

Then take a host away (kill its training process and `systemctl stop ringd`
there, or `ringctl leave`): the other hosts' collective in flight fails with
ringd.ResizedError, ringd.elastic puts their state back to the last commit,
and training goes on over the hosts that are left, with new ranks. Start the
process again on the returning host (`ringctl join` first if it left): it
takes the trained state from the host in the ring longest and joins in.

The model is a linear regression y = X w: at step s, rank r trains on a
batch drawn from the seed (seed, s, r), so a run can be replayed, and the
gradients are averaged over the ranks of the ring at that step (allreduce
"mean"). The true weights are known, so the script ends by printing how far
the learned ones are (every host prints the same: the ranks' weights are
compared byte for byte with an allgather) and exits with status 1 if they
did not converge or the ranks disagree.
"""

import argparse
import hashlib
import os
import sys
import time

import numpy as np

try:
    import ringd
except ImportError:  # run from a checkout without PYTHONPATH
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "client", "python"))
    import ringd
import ringd.elastic as elastic


def true_weights(args):
    return np.random.default_rng([args.seed, 0xC0FFEE]).standard_normal(args.dim)


def batch(args, step, rank):
    """Rank's batch of step: the same in every run."""
    g = np.random.default_rng([args.seed, step, rank])
    x = g.standard_normal((args.batch, args.dim))
    y = x @ true_weights(args) + 0.01 * g.standard_normal(args.batch)
    return x, y


def numpy_step(args, conn, state):
    x, y = batch(args, state.step, conn.rank)
    grad = 2 * x.T @ (x @ state.w - y) / args.batch
    conn.allreduce(grad, op="mean", name="grad")
    state.w -= args.lr * grad
    return float(np.mean((x @ state.w - y) ** 2))


def torch_step(args, conn, state):
    import torch

    x, y = (torch.from_numpy(a) for a in batch(args, state.step, conn.rank))
    state.optimizer.zero_grad()
    loss = ((state.model(x)[:, 0] - y) ** 2).mean()
    loss.backward()
    grad = state.model.weight.grad
    g = grad.numpy().reshape(-1).copy()
    conn.allreduce(g, op="mean", name="grad")
    grad.copy_(torch.from_numpy(g).reshape(grad.shape))
    state.optimizer.step()
    return float(loss)


def weights(args, state):
    if args.torch:
        return state.model.weight.detach().numpy().reshape(-1).copy()
    return state.w.copy()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--print-every", type=int, default=100)
    p.add_argument("--sleep", type=float, default=0.0, help="seconds per step, to watch it")
    p.add_argument("--torch", action="store_true", help="a torch.nn.Linear and torch.optim.SGD")
    p.add_argument("--socket", help="the daemon's socket (default $RINGD_SOCKET)")
    args = p.parse_args()

    conn = ringd.connect(args.socket)
    if args.torch:
        import torch

        torch.set_num_threads(1)
        model = torch.nn.Linear(args.dim, 1, bias=False).double()
        torch.nn.init.zeros_(model.weight)
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.5)
        state = elastic.State(model=model, optimizer=opt, step=0, loss=0.0)
        one_step = torch_step
    else:
        state = elastic.State(w=np.zeros(args.dim), step=0, loss=0.0)
        one_step = numpy_step

    def on_resize(state, error):
        print(f"step {state.step}: {error.message}; back to the last commit, "
              f"now rank {conn.rank} of {conn.size}", flush=True)

    @elastic.run(conn=conn, on_resize=on_resize)
    def train(state):
        while state.step < args.steps:
            state.loss = one_step(args, conn, state)
            state.step += 1
            state.commit()
            if state.step % args.print_every == 0 and conn.rank == 0:
                print(f"step {state.step:6d}  ranks {conn.size}  loss {state.loss:.6f}", flush=True)
            if args.sleep:
                time.sleep(args.sleep)

    t0 = time.monotonic()
    train(state)
    w = weights(args, state)
    everyone = conn.allgather(w, name="final weights")
    same = all(np.array_equal(everyone[0], row) for row in everyone)
    err = float(np.linalg.norm(w - true_weights(args)))
    digest = hashlib.sha256(w.tobytes()).hexdigest()[:16]
    print(f"rank {conn.rank} of {conn.size}: {args.steps} steps in {time.monotonic() - t0:.1f} s, "
          f"{state.resizes} resize(s) here, |w - w_true| = {err:.2e}, weights {digest}, "
          f"{'the same on every rank' if same else 'DIFFERENT between ranks'}", flush=True)
    return 0 if same and err < 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
