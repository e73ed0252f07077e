"""The elastic ring split by the network: 5 hosts on the namespace testbed
($TESTBED, made by test_elastic_netns.sh), cut into 2 and 3. The 3 go on,
the 2 wait ("only 2 of 5 hosts reachable"); never do both sides run. Once
the network heals, all 5 run again by themselves. Every sum is checked,
and the run against a replay of its membership schedule."""

import os
import subprocess
import time

from cluster import Cluster, now_ms

TESTBED = os.environ["TESTBED"]
BR = f"{TESTBED}-br"
EVICT_S = 2
CONFIG = (f"evict_after: {EVICT_S}s\n"
          "collective_timeout: 6s\n"
          "connect_timeout: 1s\n"
          "heartbeat_interval: 250ms\n"
          "heartbeat_timeout: 1500ms\n"
          "backoff_max: 1s\n")


def ip_br(*args):
    subprocess.run(["ip", "-n", BR, *args], check=True)


def split(side):
    """Moves the switch ports of the hosts in side to a switch of their own."""
    subprocess.run(["ip", "-n", BR, "link", "add", "br1", "type", "bridge"], check=False)
    ip_br("link", "set", "br1", "up")
    for h in side:
        ip_br("link", "set", f"h{h}", "master", "br1")


def heal(side):
    for h in side:
        ip_br("link", "set", f"h{h}", "master", "br0")


def test_a_split_network_runs_on_the_majority_only_and_heals(tmp_path):
    addresses = [f"198.18.0.{i + 1}:7700" for i in range(5)]
    c = Cluster(tmp_path, 5, CONFIG, addresses=addresses,
                wrap=lambda i: ["ip", "netns", "exec", f"{TESTBED}-h{i}"])
    try:
        steps = 1200
        c.train(steps, until_step=30)

        t_cut = now_ms()
        split([0, 1])
        e = c.wait_event(2, lambda e: e[1] == "ok" and int(e[2][2]) == 3, 40, t_cut)
        print(f"split to the first step of the 3: {(e[0] - t_cut) / 1000:.2f} s")
        e = c.wait_event(0, lambda e: e[1] == "error" and "min_hosts 3" in " ".join(e[2]),
                         40, t_cut)
        assert "only 2 of 5 hosts reachable" in " ".join(e[2]), e
        time.sleep(3 * EVICT_S)

        t_heal = now_ms()
        heal([0, 1])
        e = c.wait_event(0, lambda e: e[1] == "ok" and int(e[2][2]) == 5, 60, t_heal)
        print(f"heal to the first step of all 5: {(e[0] - t_heal) / 1000:.2f} s")

        schedule = c.check_run(range(5), steps, timeout=180)
        # The 2 never ran a step on their own.
        assert all(bin(m).count("1") >= 3 for m in schedule.values())
    finally:
        bad = c.stop_all()
        assert not bad, "\n".join(c.tail(i) for i in bad)
