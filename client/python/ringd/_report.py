"""ringd.report(): where every rank of the ring spent its time, as a dict.

    import ringd
    r = ringd.report()                       # the daemon of $RINGD_SOCKET
    print(ringd.report_line(r))              # one line for the end of a job
    for k in r["ranks"]:
        print(k["rank"], k["host"], k["compute_s"], k["wait_s"], k["transfer_s"], k["failure_s"])

The dict is what `ringctl report --json` prints, made by libringd itself
(ringd_report_json()), so both always agree: per rank its compute, wait,
transfer and failure seconds, calls and bytes, for the job and the last
minute ("window"), and its recent calls; per host its CPU seconds and
energy ("energy_source": "rapl" measured, or "estimated"); and for the
ring the wall time, the useful work, the speedup and efficiency they give,
and "waited_most", the rank the others waited for most (None if none).
docs/ops.md, "Report", explains every key. Needs no NumPy.
"""

import ctypes
import json
import time

from . import _lib


def report(socket=None):
    """The report of the ring the daemon at socket (default: $RINGD_SOCKET,
    else /run/ringd/ringd.sock) belongs to, as a dict; asks as an observer,
    taking no rank. Raises RingError if the daemon cannot be asked."""
    lib = _lib.load()
    out = ctypes.c_void_p()
    path = socket.encode() if isinstance(socket, str) else socket
    rc = lib.c.ringd_report_json(path, ctypes.byref(out))
    if rc < 0:
        raise lib.error(rc, None)
    try:
        text = ctypes.string_at(out.value).decode("utf-8", "replace")
    finally:
        lib.c.ringd_report_free(out)
    return json.loads(text)


def job_over(r):
    """Whether every host has reported, none with a rank still connected: the
    summaries hold the end of the job."""
    hosts = r.get("hosts", [])
    return bool(hosts) and all(h["reported"] and h["ranks_connected"] == 0 for h in hosts)


def final_report(socket=None, timeout=3.0):
    """report(), once the last ranks of every host have left (each daemon
    sends its summary round the ring as its last rank leaves), or as it is
    after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        r = report(socket)
        if job_over(r) or time.monotonic() >= deadline:
            return r
        time.sleep(0.1)


def report_line(r):
    """One line saying where the time went: "4 ranks, 16.0 s: compute 62%,
    wait 25%, transfer 13%, failure 0%; speedup 2.50 of 4 (efficiency 62%);
    the others waited most for rank 3 on h3 (4.0 s); energy 315 J
    (estimated)"."""
    n = r["ranks_reporting"]
    if not n:
        return "no rank has reported"
    spent = r["useful_s"] + r["wait_s"] + r["transfer_s"] + r["failure_s"]

    def share(x):
        return f"{100 * x / spent:.0f}%" if spent > 0 else "0%"

    line = (
        f"{n} rank{'s' if n != 1 else ''}, {r['wall_s']:.1f} s: compute {share(r['useful_s'])}, "
        f"wait {share(r['wait_s'])}, transfer {share(r['transfer_s'])}, "
        f"failure {share(r['failure_s'])}; speedup {r['speedup']:.2f} of {n} "
        f"(efficiency {100 * r['efficiency']:.0f}%)"
    )
    w = r.get("waited_most")
    if w:
        line += f"; the others waited most for rank {w['rank']} on {w['host']} ({w['late_s']:.1f} s)"
    if r["energy_source"] != "none":
        line += f"; energy {r['energy_j']:.0f} J ({r['energy_source']})"
    missing = [h["host"] for h in r.get("hosts", []) if not h["reported"]]
    if missing:
        line += f"; no summary from {', '.join(missing)}"
    return line
