"""A rank of test_report.py: it computes (sleeps), allreduces, and writes
down what it did, for the test to hold the report against.

    report_rank.py OUT.json      with RINGD_SOCKET, RINGD_LOCAL_RANK and:
      COMPUTE      seconds of compute per step
      STEPS        stop after this many steps (every rank the same)
      RUN_S        rank 0: stop the job (a flag in the allreduce) after
                   this many seconds once it has recovered from a failure
      DIE_AT_STEP  submit that step's allreduce and die in it (SIGKILL), as
                   a crashed process does

Every step allreduces 64 float32 (more elements than hosts, so that every
host learns every host's start: PROTOCOL.md, Stragglers); element 0 is the
stop flag. A call that fails is written down and the rank goes on to its
next step, as a training loop that retries would.
"""

import json
import os
import signal
import sys
import time

import numpy as np

import ringd


def write(path, rec):
    with open(path + ".tmp", "w") as f:
        json.dump(rec, f)
    os.rename(path + ".tmp", path)


def main():
    out = sys.argv[1]
    compute = float(os.environ["COMPUTE"])
    steps = int(os.environ.get("STEPS", "0"))
    run_s = float(os.environ.get("RUN_S", "0"))
    die_at = int(os.environ.get("DIE_AT_STEP", "-1"))
    c = ringd.connect()
    connected = time.monotonic()
    buf = c.empty(64, np.float32)
    rec = {"rank": c.rank, "pid": os.getpid(), "compute": [], "submits": [], "calls": 0,
           "failed": 0,
           "first_submit": None, "failed_submit": None, "recovered_submit": None,
           "died_submit": None}
    started = back = connected
    i = 0
    while True:
        time.sleep(compute)
        buf[:] = 0
        recovered = rec["recovered_submit"] is not None or run_s == 0
        if (steps and i + 1 >= steps) or (
                run_s and c.rank == 0 and recovered and time.monotonic() - started >= run_s):
            buf[0] = 1.0
        submit = time.monotonic()
        # What the daemon counts as compute: from the last result (or the
        # connection) to this call, whatever held the process up.
        rec["compute"].append(submit - back)
        rec["submits"].append(submit)  # the ranks share one monotonic clock
        if rec["first_submit"] is None:
            rec["first_submit"] = submit
        rec["calls"] += 1
        if i == die_at:
            c.allreduce_async(buf)
            rec["died_submit"] = submit
            write(out, rec)
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            c.allreduce(buf)
        except ringd.RingError:
            back = time.monotonic()
            rec["failed"] += 1
            if rec["failed_submit"] is None:
                rec["failed_submit"] = submit
            i += 1
            continue
        back = time.monotonic()
        if rec["failed_submit"] is not None and rec["recovered_submit"] is None:
            rec["recovered_submit"] = submit
        i += 1
        if buf[0] > 0:
            break
    write(out, rec)
    c.close()


if __name__ == "__main__":
    main()
