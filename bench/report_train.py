#!/usr/bin/env python3
"""One report of a real training run: examples/train_mlp.py on a ring of N
daemons on this machine, then `ringctl report` of the whole job as a table,
JSON, a chart and a trace (bench/RESULTS.md, "Accounting overhead and a
training run's report").

    bench/report_train.py OUT_DIR [-n 4] [-- TRAIN_MLP OPTIONS]

Writes OUT_DIR/report.txt (the table), report.json, report.svg and
trace.json, and prints the table. The binaries are the build tree's
(build/daemon/ringd, build/client/ringctl; $RINGD_BIN, $RINGCTL_BIN
override), Debian's python3 runs the ranks.
"""

import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

from ringd import final_report, launch  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("-n", type=int, default=4, help="daemons and ranks (4)")
    ap.add_argument("train", nargs=argparse.REMAINDER, help="-- options of train_mlp.py")
    args = ap.parse_args()
    train = args.train[1:] if args.train[:1] == ["--"] else args.train
    os.makedirs(args.out, exist_ok=True)
    ringctl = launch.find_ringctl()
    ring = launch.LocalRing(args.n)
    ring.start()
    try:
        procs = []
        for r in range(args.n):
            env = launch.rank_env(r, args.n, 0, 1, ring.env(r))
            env.update(PYTHONPATH=os.path.join(ROOT, "client", "python"), OMP_NUM_THREADS="1")
            procs.append(subprocess.Popen(
                [sys.executable, os.path.join(ROOT, "examples", "train_mlp.py"), *train],
                env=env, stdout=subprocess.DEVNULL if r else None))
        codes = [p.wait() for p in procs]
        if any(codes):
            sys.exit(f"report_train: a rank failed: {codes}")
        final_report(ring.sockets[0], timeout=5)
        out = lambda name: os.path.join(args.out, name)  # noqa: E731
        table = subprocess.run([ringctl, "--socket", ring.sockets[0], "report", "--svg",
                                out("report.svg"), "--trace", out("trace.json")],
                               capture_output=True, text=True, check=True).stdout
        with open(out("report.txt"), "w") as f:
            f.write(table)
        with open(out("report.json"), "w") as f:
            f.write(subprocess.run([ringctl, "--socket", ring.sockets[0], "report", "--json"],
                                   capture_output=True, text=True, check=True).stdout)
        print(table, end="")
    finally:
        ring.stop()


if __name__ == "__main__":
    main()
