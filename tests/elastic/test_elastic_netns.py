"""The elastic ring split by the network: 5 hosts on the namespace testbed
($TESTBED, made by test_elastic_netns.sh), cut into 2 and 3. The 3 go on,
the 2 wait ("only 2 of 5 hosts reachable"); never do both sides run. Once
the network heals, all 5 run again by themselves. Every sum is checked,
the run against a replay of its membership schedule, and every call's
outcome against the other ranks' (cluster.py, check_calls())."""

import os
import subprocess
import time

from cluster import Cluster, RankLog, check_calls, now_ms
from timing import durations, scaled

TESTBED = os.environ["TESTBED"]
BR = f"{TESTBED}-br"
# Timings and bounds as written for a machine shared two ways, stretched on
# a busier one (tests/timing.py).
EVICT_S = 2
HEARTBEAT_TIMEOUT_S = 1.5


def config(collective_timeout=6):
    return durations(evict_after=EVICT_S, collective_timeout=collective_timeout,
                     connect_timeout=1, heartbeat_interval=0.25,
                     heartbeat_timeout=HEARTBEAT_TIMEOUT_S, backoff_max=1)


def ip_br(*args):
    subprocess.run(["ip", "-n", BR, *args], check=True)


def split(side):
    """Moves the switch ports of the hosts in side to a switch of their own."""
    subprocess.run(["ip", "-n", BR, "link", "add", "br1", "type", "bridge"], check=False,
                   stderr=subprocess.DEVNULL)  # there already: a second split
    ip_br("link", "set", "br1", "up")
    for h in side:
        ip_br("link", "set", f"h{h}", "master", "br1")


def heal(side):
    for h in side:
        ip_br("link", "set", f"h{h}", "master", "br0")


def five_hosts(tmp_path, collective_timeout=6):
    addresses = [f"198.18.0.{i + 1}:7700" for i in range(5)]
    return Cluster(tmp_path, 5, config(collective_timeout), addresses=addresses,
                   wrap=lambda i: ["ip", "netns", "exec", f"{TESTBED}-h{i}"])


def heal_and_check(c, side):
    """Heals the split of side, waits for all 5 to run, checks the run and
    every call's outcome; returns the rank logs and when the heal was."""
    t_heal = now_ms()
    heal(side)
    e = c.wait_event(0, lambda e: e[1] == "ok" and int(e[2][2]) == 5, 60, t_heal)
    print(f"heal to the first step of all 5: {(e[0] - t_heal) / 1000:.2f} s")
    schedule = c.finish(range(5), timeout=180)
    # The hosts cut off never ran a step on their own.
    assert all(bin(m).count("1") >= 3 for m in schedule.values())
    logs = [RankLog(c.rank_logs[i], i) for i in range(5)]
    for log in logs:
        log.update()
    r = check_calls(logs, 3)
    print("calls:", dict(r.counts), "exempt:", dict(r.exempt))
    assert not r.violations, "\n".join(map(str, r.violations))
    return logs, t_heal


def test_a_split_network_runs_on_the_majority_only_and_heals(tmp_path, monkeypatch):
    """The collective in flight when the network splits is failed alike on
    both sides: the 2, which cannot know how the 3 ended it, do not settle
    it with a lap of their own. h4 closes over its two right neighbours at
    once, h1 having neither answered a probe nor shown a sign of life since
    h4's link to h0 went silent: the 3 run heartbeat_timeout + evict_after
    after the split, give or take, not evict_after more (was 5.6 s)."""
    monkeypatch.setenv("ELASTIC_RANK_MEMBERS", "1")
    c = five_hosts(tmp_path)
    try:
        c.train(10**9, until_step=30)  # until c.finish()

        t_cut = now_ms()
        split([0, 1])
        e = c.wait_event(2, lambda e: e[1] == "ok" and int(e[2][2]) == 3, 40, t_cut)
        took = (e[0] - t_cut) / 1000
        print(f"split to the first step of the 3: {took:.2f} s")
        bound = scaled(HEARTBEAT_TIMEOUT_S + EVICT_S + 1.5)
        assert took <= bound, f"{took:.2f} s to a ring of the 3, past {bound:.2f} s"
        e = c.wait_event(0, lambda e: e[1] == "error" and "min_hosts 3" in " ".join(e[2]),
                         40, t_cut)
        assert "only 2 of 5 hosts reachable" in " ".join(e[2]), e
        time.sleep(scaled(3 * EVICT_S))

        heal_and_check(c, [0, 1])
    finally:
        bad = c.stop_all()
        assert not bad, "\n".join(c.tail(i) for i in bad)


def test_a_call_held_by_a_host_cut_off_over_two_resizes_ends_alike(tmp_path, monkeypatch):
    """h0 is cut off (the 4 others go on), then h1 (the 3 left go on; h0
    and h1, a ring of 2, wait). h0 still holds the call it was in when the
    network heals (collective_timeout is long), and the lap that takes both
    back settles the 3's epoch: h1 was in the one before it, and takes its
    verdict from the lap (prior); h0 ends its call as the others did if it
    learnt the epochs between (from h1, while the two waited: peer protocol
    11 keeps the verdict of a ring that closed over a host), or answers
    "outcome unknown"; never the words of the resize that took it back.
    (Was: "ring resized to 5 hosts" on h0, "ring resized to 4 hosts" on
    the others, for one call.)"""
    monkeypatch.setenv("ELASTIC_RANK_MEMBERS", "1")
    c = five_hosts(tmp_path, collective_timeout=60)
    try:
        c.train(10**9, until_step=30)  # until c.finish()

        t_cut = now_ms()
        split([0])
        c.wait_event(2, lambda e: e[1] == "ok" and int(e[2][2]) == 4, 40, t_cut)
        t_second = now_ms()
        split([1])
        c.wait_event(2, lambda e: e[1] == "ok" and int(e[2][2]) == 3, 40, t_second)
        # h0's held call ends at its deadline, 60 s after the first cut.
        assert now_ms() - t_cut < scaled(45000), "too slow: h0's held call may have expired"

        logs, t_heal = heal_and_check(c, [0, 1])
        held = [x for x in logs[0].procs[0].calls if x.t >= t_heal and x.rc != 0]
        assert held, "h0 held no call at the heal"
        # As the others ended that call (check_calls() compared them: the
        # words of the resize that closed over h0, or over h1), or "outcome
        # unknown" if h0 cannot tell; never the words of the resize that
        # took it back.
        assert "ring resized to 5 hosts" not in held[0].text, held[0].line
    finally:
        bad = c.stop_all()
        assert not bad, "\n".join(c.tail(i) for i in bad)


def cut(ns, to_addr, action):
    """Drops, in namespace ns, every TCP packet to to_addr's ring port:
    the host can no longer reach it, every other direction still works."""
    host, port = to_addr.split(":")
    subprocess.run(["ip", "-n", ns, "rule", action, "to", f"{host}/32", "ipproto", "tcp",
                    "dport", port, "prio", "100", "blackhole"], check=True)


def test_an_asymmetric_cut_runs_a_ring_of_the_hosts_that_reach_each_other_and_heals(tmp_path):
    """h0 -> h1 -> h2 -> h0 with min_hosts 2, and a firewall rule on h0 that
    drops what it sends to h1's ring port: {h1, h2} and {h0, h2} are rings
    every link of which works, {h0, h1, h2} is not. One of them runs within
    evict_after + 5 s of the cut, and all three within 5 s of the heal;
    every sum is right and every step ran once."""
    evict_s = 3
    addresses = [f"198.18.0.{i + 1}:7700" for i in range(3)]
    c = Cluster(tmp_path, 3, "min_hosts: 2\n" + durations(evict_after=evict_s, heartbeat_timeout=2,
                                                          collective_timeout=6),
                addresses=addresses,
                wrap=lambda i: ["ip", "netns", "exec", f"{TESTBED}-h{i}"])
    ns0 = f"{TESTBED}-h0"
    try:
        c.train(10**9, until_step=30)  # until c.finish()

        t_cut = now_ms()
        cut(ns0, addresses[1], "add")
        # h2 is in both rings of two: its rank sees one run.
        e = c.wait_event(2, lambda e: e[1] == "ok" and int(e[2][2]) == 2, 40, t_cut)
        took = (e[0] - t_cut) / 1000
        print(f"cut to the first step of a ring of two: {took:.2f} s")
        assert took <= scaled(evict_s + 5), f"{took:.2f} s from the cut to a ring of two"
        time.sleep(scaled(2 * evict_s))  # it keeps running, cut

        t_heal = now_ms()
        cut(ns0, addresses[1], "del")
        e = c.wait_event(2, lambda e: e[1] == "ok" and int(e[2][2]) == 3, 40, t_heal)
        took = (e[0] - t_heal) / 1000
        print(f"heal to the first step of all three: {took:.2f} s")
        assert took <= scaled(5), f"{took:.2f} s from the heal to the ring of three"

        schedule = c.finish(range(3), timeout=180)
        assert all(bin(m).count("1") >= 2 for m in schedule.values())
    finally:
        subprocess.run(["ip", "-n", ns0, "rule", "del", "prio", "100"], check=False,
                       stderr=subprocess.DEVNULL)
        bad = c.stop_all()
        assert not bad, "\n".join(c.tail(i) for i in bad)
