"""An in-process stand-in for an elastic ring, for testing ringd.elastic
without daemons: FakeGroup holds the members (threads, each with its own
FakeConn), runs their collectives, and resizes like the daemons do.

A collective is matched across members by its number since the member last
learnt of a resize. resize(members) ends the current membership: the
collective each old member has in flight fails with ringd.ResizedError, and
an old member that is not in a collective gets it from its next one, once;
a member added by join() starts on the new membership. Ranks are positions
in the member list.
"""

import threading

import numpy as np

from ringd._lib import ResizedError

WAIT_S = 20  # a test that went wrong fails instead of hanging


def resized_error(group):
    return ResizedError(-21, "RINGD_ERESIZED", f"ring resized to {len(group.members)} ranks")


class FakeGroup:
    def __init__(self, n):
        self.cv = threading.Condition()
        self.epoch = 1
        self.members = list(range(n))
        self.next_id = n
        self.slots = {}  # (epoch, seq) -> {member: array}
        self.collectives = 0

    def conn(self, member):
        """The FakeConn of member, one of the first n."""
        return FakeConn(self, member)

    def join(self):
        """A new member, last in rank order: resizes, and returns its conn."""
        with self.cv:
            member = self.next_id
            self.next_id += 1
            self.resize(self.members + [member])
            return FakeConn(self, member)

    def leave(self, member):
        with self.cv:
            self.resize([m for m in self.members if m != member])

    def resize(self, members):
        with self.cv:
            self.epoch += 1
            self.members = list(members)
            self.cv.notify_all()

    def run(self, conn, kind, array, root=0, op="sum"):
        with self.cv:
            if conn.epoch != self.epoch:
                conn.epoch = self.epoch
                conn.seq = 0
                raise resized_error(self)
            epoch, members = self.epoch, list(self.members)
            key = (epoch, conn.seq)
            conn.seq += 1
            slot = self.slots.setdefault(key, {})
            slot[conn.member] = np.array(array, copy=True)
            self.cv.notify_all()
            # A collective completes or fails on every member alike, as the
            # daemons' do: one that all members entered is done.
            while not all(m in slot for m in members):
                if self.epoch != epoch:
                    conn.epoch = self.epoch
                    conn.seq = 0
                    raise resized_error(self)
                if not self.cv.wait(WAIT_S):
                    raise RuntimeError(f"fake collective {key} waited for {members}")
            self.collectives += 1
            ins = [slot[m] for m in members]
        if kind == "allgather":
            return np.stack(ins)
        if kind == "broadcast":
            return ins[root]
        if op == "mean":
            return sum(ins) / len(ins)
        return sum(ins)


class FakeConn:
    """The part of ringd.Connection that ringd.elastic and the tests use."""

    def __init__(self, group, member):
        self.group = group
        self.member = member
        self.epoch = group.epoch
        self.seq = 0

    @property
    def rank(self):
        return self.group.members.index(self.member)

    @property
    def size(self):
        return len(self.group.members)

    def membership(self):
        g = self.group
        with g.cv:
            return {"epoch": g.epoch, "rank": self.rank, "size": self.size, "ready": True,
                    "hosts": [], "live": [], "out": []}

    def allgather(self, array, name=None):
        return self.group.run(self, "allgather", array)

    def broadcast(self, array, root=0, name=None):
        array[...] = self.group.run(self, "broadcast", array, root=root)
        return array

    def allreduce(self, array, op="sum", name=None):
        array[...] = self.group.run(self, "allreduce", array, op=op)
        return array
