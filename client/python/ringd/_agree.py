"""Checking that every rank is about to reduce the same tensors.

The daemon compares what ranks submit by count, type, operator and a short
hash of the name: two tensors of different shapes but equal size, (3, 4) on
one rank and (2, 6) on another, pass, and a fused buffer of parameters is
only bytes to it. So the front ends describe what they submit as a list of
(name, shape, dtype) and call check_same() first: every rank sends a digest
of its list (one allgather of 32 bytes); if they differ, the ranks exchange
the lists themselves and each raises the same RingError(EMISMATCH), in
tensor terms:

    broadcast_parameters: fc1.weight: rank 2 has (33, 20) float32, rank 0 has (32, 20)

A list that passed is remembered by its digest on the connection, so a
training loop pays the allgather once per set of tensors, and again only
when the set changes. Every rank must reach check_same() with the same
history, as for any collective; a rank whose list changes when the others'
does not is out of step with them, and the daemon's own mismatch check
fails the next collective on every rank.
"""

import hashlib
import json

import numpy as np

from . import _lib
from ._lib import make_error


def describe(shape, dtype=None):
    """'(33, 20) float32', or '(33, 20)' without a dtype."""
    text = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    return text if dtype is None else f"{text} {dtype}"


def _digest(what, items):
    text = json.dumps([what, items], separators=(",", ":"))
    return hashlib.sha256(text.encode()).digest()


def check_same(conn, what, items):
    """Raises RingError(EMISMATCH) on every rank, naming the first difference,
    unless every rank passes the same items: a list of (name, shape, dtype
    name) with shape a tuple of ints. what names the caller in the message
    and in the collectives' names."""
    items = [[str(n), [int(d) for d in shape], str(dt)] for n, shape, dt in items]
    digest = _digest(what, items)
    if digest in conn._agreed:
        return
    label = f"shapes of {what}"[: _lib.NAME_MAX]
    everyone = conn.allgather(np.frombuffer(digest, np.uint8), name=label)
    if (everyone == everyone[0]).all():
        conn._agreed.add(digest)
        return
    # The digests differ: every rank learns every rank's list, and all come
    # to the same message.
    mine = json.dumps(items).encode()
    lengths = conn.allgather(np.array([len(mine)], np.int64), name=label)[:, 0]
    padded = np.zeros(int(lengths.max()), np.uint8)
    padded[: len(mine)] = np.frombuffer(mine, np.uint8)
    rows = conn.allgather(padded, name=label)
    lists = [json.loads(rows[r, : lengths[r]].tobytes()) for r in range(conn.size)]
    raise make_error(_lib.EMISMATCH, f"{what}: {difference(lists)}")


def difference(lists):
    """What differs between the ranks' lists (lists[r] is rank r's), said
    from rank 0's point of view."""
    ref = lists[0]
    odd = [r for r in range(1, len(lists)) if lists[r] != ref]
    r = odd[0]
    theirs = lists[r]
    text = None
    for i, (a, b) in enumerate(zip(ref, theirs)):
        if a == b:
            continue
        if a[0] == b[0]:
            mine = describe(a[1], a[2] if a[2] != b[2] else None)
            text = f"{a[0]}: rank {r} has {describe(b[1], b[2])}, rank 0 has {mine}"
        else:
            text = (
                f"tensor {i}: rank {r} has {b[0]} {describe(b[1], b[2])}, "
                f"rank 0 has {a[0]} {describe(a[1], a[2])}"
            )
        break
    if text is None:
        longer, who = (ref, 0) if len(ref) > len(theirs) else (theirs, r)
        extra = longer[min(len(ref), len(theirs))]
        text = (
            f"rank {r} has {len(theirs)} tensors, rank 0 has {len(ref)} "
            f"(rank {who} also has {extra[0]} {describe(extra[1], extra[2])})"
        )
    if len(odd) > 1:
        text += f"; ranks {', '.join(map(str, odd[1:]))} differ from rank 0 too"
    return text
