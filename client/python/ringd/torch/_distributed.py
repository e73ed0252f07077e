"""The torch.distributed backend "ringd".

    import ringd.torch                       # registers the backend
    import torch.distributed as dist
    dist.init_process_group("ringd")         # rank and world size from the daemon

Importing ringd.torch registers "ringd" with dist.Backend.register_backend()
and an init method "ringd://" with dist.register_rendezvous_handler(), and
makes init_process_group("ringd") use "ringd://" when given neither an
init_method nor a store (other backends are left alone). "ringd://" needs
no MASTER_ADDR or store: the rank and world size are the ones the daemon
gives this process (ranks numbered host by host in ring order). A rank or
world size given anyway, as arguments or as RANK, WORLD_SIZE and
LOCAL_RANK in the environment, must agree with the daemon's, or
init_process_group fails saying which differs. Its store is a stand-in
whose add() is an allreduce over the ring: enough for the barrier that ends
init_process_group and new_group, and nothing else.

The process group itself is C++ (the extension _ringd_pg, built by CMake
with the project when PyTorch's headers are installed: libtorch-dev,
pybind11-dev), because torch 1.13 calls process groups from C++ (DDP's
reducer, its parameter checks and broadcasts); it calls back into Backend
below, which runs each collective on the process's one ringd connection.
Collectives: all_reduce (SUM, AVG, PRODUCT, MIN, MAX), broadcast, reduce,
all_gather, _all_gather_base, reduce_scatter, _reduce_scatter_base,
barrier, each also async (work.wait() raises ringd.RingError with ringd's
message; work.get_future() completes by itself). Subgroups are not
supported: ringd's collectives always span the whole ring.

Newer torch: torch 2.x registers a backend's creator with devices=, and
expects it to return a c10d::Backend, the per-device half of what 1.13 calls
a ProcessGroup; the collectives' signatures are the same, so porting is
changing the base class and the registration (see docs/pytorch.md).
"""

import functools
import glob
import importlib
import importlib.util
import inspect
import os
import urllib.parse

import numpy as np
import torch
import torch.distributed as dist

from .. import _agree, _core, _lib
from . import _tensors
from ._tensors import agree, signature

NAME = "ringd"
EXTENSION = "_ringd_pg"


# ---- the work of one collective --------------------------------------------------


class Work:
    """The ringd requests of one torch.distributed collective, seen as one:
    complete when the last is (requests complete in order), failed with the
    first error. The C++ RingdWork calls these methods."""

    def __init__(self, requests):
        self._requests = requests

    def wait(self, timeout=None):
        if self._requests:
            try:
                self._requests[-1].wait(timeout)
            except _lib.WaitTimeout:
                raise
            except _lib.RingError:
                pass  # raised below, the first of them
        err = self.exception()
        if err is not None:
            raise err

    def is_completed(self):
        return not self._requests or self._requests[-1].test()

    def exception(self):
        for r in self._requests:
            if r.done and r.exception() is not None:
                return r.exception()
        return None

    def add_done_callback(self, fn):
        """fn(None) or fn(error) once complete."""
        if not self._requests:
            fn(None)
        else:
            self._requests[-1].add_done_callback(lambda _: fn(self.exception()))


# ---- the collectives ---------------------------------------------------------------


class Backend:
    """What ProcessGroupRingd calls, GIL held: each method submits its
    collective on conn and returns a Work. op is the name of torch's
    ReduceOp (the C++ side maps it): "sum", "mean", "prod", "min", "max", or
    one ringd lacks ("band", ...)."""

    def __init__(self, conn):
        self.conn = conn

    @staticmethod
    def _op(op, tensor):
        if op not in ("sum", "mean", "prod", "min", "max"):
            raise ValueError(f"ringd has no {op} reduction (it has SUM, AVG, PRODUCT, MIN, MAX)")
        if op == "mean" and not tensor.is_floating_point():
            raise ValueError(f"ringd averages (ReduceOp.AVG) float tensors only, not {tensor.dtype}")
        return op

    def _one(self, tensors, what, check=_tensors.check):
        """The one tensor (or list of tensors) of this process in tensors."""
        if len(tensors) != 1:
            raise ValueError(f"{what}: ringd takes one tensor per process, got {len(tensors)}")
        check(tensors[0], what)
        return tensors[0]

    def _list(self, tensors, what):
        for t in tensors:
            _tensors.check(t, what)

    def _reduce(self, kind, what, out, src, op, keep, done=None):
        """Submits a reduction of src's elements into out (src None: in place)."""
        code = _tensors.dtype_code(out.dtype)
        return self.conn._submit_ptr(
            kind, what, buf=out.data_ptr(), input=None if src is None else src.data_ptr(),
            count=out.numel(), code=code, op=self._op(op, out), keep=keep, on_done=done,
            name=what,
        )

    def _bytes(self, kind, what, buf, count, inp=None, root=0, keep=None, done=None):
        """Submits a collective that moves bytes (broadcast, allgather)."""
        return self.conn._submit_ptr(
            kind, what, buf=buf.data_ptr(), input=None if inp is None else inp.data_ptr(),
            count=count, code=_lib.DTYPES["uint8"], root=root, keep=keep, on_done=done, name=what,
        )

    def allreduce(self, tensors, op):
        what = "all_reduce"
        t = self._one(tensors, what)
        agree(self.conn, what, [("tensor", t)])
        work, done = _tensors.inplace(t)
        return Work([self._reduce(_lib.COLL_ALLREDUCE, what, work, None, op, (t, work), done)])

    def reduce(self, tensors, root, root_tensor, op):
        what = "reduce"
        t = self._one(tensors, what)
        agree(self.conn, what, [("tensor", t)])
        # Every rank reduces; only the root keeps the result.
        work, done = _tensors.inplace(t) if self.conn.rank == root else (t.contiguous().clone(), None)
        return Work([self._reduce(_lib.COLL_ALLREDUCE, what, work, None, op, (t, work), done)])

    def broadcast(self, tensors, root, root_tensor):
        what = "broadcast"
        t = self._one(tensors, what)
        agree(self.conn, what, [("tensor", t)])
        work, done = _tensors.inplace(t)
        nbytes = work.numel() * work.element_size()
        return Work([self._bytes(_lib.COLL_BROADCAST, what, work, nbytes, root=root,
                                 keep=(t, work), done=done)])

    def _gather_into(self, what, out, inp, done):
        """Allgathers inp into out, a contiguous tensor of size x inp's
        elements, then calls done(); returns the Work."""
        src = inp.contiguous()
        return Work([self._bytes(_lib.COLL_ALLGATHER, what, out, src.numel() * src.element_size(),
                                 inp=src, keep=(out, src, inp), done=done)])

    def allgather(self, output_lists, inputs):
        what = "all_gather"
        inp = self._one(inputs, what)
        outs = self._one(output_lists, what, self._list)
        if len(outs) != self.conn.size or any(o.shape != inp.shape or o.dtype != inp.dtype
                                               for o in outs):
            raise ValueError(f"{what}: expected {self.conn.size} output tensors of the input's "
                             f"shape {tuple(inp.shape)} and dtype {inp.dtype}")
        agree(self.conn, what, [("tensor", inp)])
        flat = torch.empty((self.conn.size,) + tuple(inp.shape), dtype=inp.dtype)

        def done():
            with torch.no_grad():
                for o, block in zip(outs, flat):
                    o.copy_(block)

        return self._gather_into(what, flat, inp, done)

    def allgather_base(self, output, input):
        what = "_all_gather_base"
        if output.numel() != input.numel() * self.conn.size or output.dtype != input.dtype:
            raise ValueError(f"{what}: the output must hold {self.conn.size} x the input's "
                             f"{input.numel()} elements of {input.dtype}")
        agree(self.conn, what, [("tensor", input)])
        work, done = _tensors.inplace(output)
        return self._gather_into(what, work, input, done)

    def reduce_scatter(self, outputs, input_lists, op):
        what = "reduce_scatter"
        out = self._one(outputs, what)
        ins = self._one(input_lists, what, self._list)
        if len(ins) != self.conn.size or any(i.shape != out.shape for i in ins):
            raise ValueError(f"{what}: expected {self.conn.size} input tensors of the output's "
                             f"shape {tuple(out.shape)}")
        return self._reduce_scatter(what, out, torch.stack([i.detach() for i in ins]), op)

    def reduce_scatter_base(self, output, input, op):
        what = "_reduce_scatter_base"
        if input.numel() != output.numel() * self.conn.size:
            raise ValueError(f"{what}: the input must hold {self.conn.size} x the output's "
                             f"{output.numel()} elements")
        return self._reduce_scatter(what, output, input, op)

    def _reduce_scatter(self, what, out, inp, op):
        agree(self.conn, what, [("tensor", inp)])
        src = inp.contiguous()
        work, done = _tensors.inplace(out)
        return Work([self._reduce(_lib.COLL_REDUCE_SCATTER, what, work, src, op,
                                  (out, work, src), done)])

    def barrier(self):
        return Work([self.conn._submit_ptr(_lib.COLL_BARRIER, "barrier", name="barrier")])

    # The collectives below are built on the ring's own. Each costs what the
    # one it stands on costs, which on a ring is near the least any can:
    # gather is an allgather (the root's incoming link carries the other
    # ranks' data either way); scatter a broadcast of every block, N/(N-1)
    # of a scatter's; all-to-all an allgather of every rank's whole input,
    # twice what a one-way ring's all-to-all moves in all, and N times its
    # memory.

    def gather(self, output_lists, inputs, root):
        what = "gather"
        inp = self._one(inputs, what)
        outs = None
        if self.conn.rank == root:
            outs = self._one(output_lists, what, self._list)
            self._blocks(what, outs, inp)
        elif any(len(o) for o in output_lists):
            raise ValueError(f"{what}: only the root, rank {root}, passes a gather_list")
        _agree.check_same(self.conn, what, [signature("tensor", inp), ("root", (root,), "")])
        flat = torch.empty((self.conn.size,) + tuple(inp.shape), dtype=inp.dtype)

        def done():
            if outs is not None:
                with torch.no_grad():
                    for o, block in zip(outs, flat):
                        o.copy_(block)

        return self._gather_into(what, flat, inp, done)

    def scatter(self, outputs, input_lists, root):
        what = "scatter"
        out = self._one(outputs, what)
        flat = torch.empty((self.conn.size,) + tuple(out.shape), dtype=out.dtype)
        if self.conn.rank == root:
            ins = self._one(input_lists, what, self._list)
            self._blocks(what, ins, out)
            with torch.no_grad():
                for block, i in zip(flat, ins):
                    block.copy_(i)
        elif any(len(i) for i in input_lists):
            raise ValueError(f"{what}: only the root, rank {root}, passes a scatter_list")
        _agree.check_same(self.conn, what, [signature("tensor", out), ("root", (root,), "")])
        me = self.conn.rank

        def done():
            with torch.no_grad():
                out.copy_(flat[me])

        nbytes = flat.numel() * flat.element_size()
        return Work([self._bytes(_lib.COLL_BROADCAST, what, flat, nbytes, root=root,
                                 keep=(out, flat), done=done)])

    def _blocks(self, what, tensors, like):
        if len(tensors) != self.conn.size or any(
                t.shape != like.shape or t.dtype != like.dtype for t in tensors):
            raise ValueError(f"{what}: expected {self.conn.size} tensors of shape "
                             f"{tuple(like.shape)} and dtype {like.dtype}, one per rank")

    def alltoall_base(self, output, input, output_splits, input_splits):
        what = "all_to_all_single"
        if output.dtype != input.dtype or tuple(output.shape[1:]) != tuple(input.shape[1:]):
            raise ValueError(f"{what}: output {tuple(output.shape)} {output.dtype} and input "
                             f"{tuple(input.shape)} {input.dtype} differ beyond their first "
                             "dimension")
        if input.dim() == 0:
            raise ValueError(f"{what}: the tensors need a first dimension to split")
        ins = self._splits(what, "input", input, input_splits)
        outs = self._splits(what, "output", output, output_splits)
        row = input[0].numel() if input.shape[0] else int(np.prod(input.shape[1:], dtype=np.int64))
        return self._alltoall(what, input.reshape(-1), ins, outs, row,
                              lambda flat_out: output.copy_(flat_out.view(output.shape)))

    def _splits(self, what, which, t, splits):
        n = self.conn.size
        if not splits:
            if t.shape[0] % n:
                raise ValueError(f"{what}: the {which}'s first dimension, {t.shape[0]}, does not "
                                 f"split into {n} equal parts; pass {which}_split_sizes")
            return [t.shape[0] // n] * n
        splits = [int(k) for k in splits]
        if len(splits) != n or min(splits) < 0 or sum(splits) != t.shape[0]:
            raise ValueError(f"{what}: {which}_split_sizes {splits} must be {n} sizes summing to "
                             f"the {which}'s first dimension, {t.shape[0]}")
        return splits

    def alltoall(self, outputs, inputs):
        what = "all_to_all"
        n = self.conn.size
        self._list(outputs, what)
        self._list(inputs, what)
        if len(outputs) != n or len(inputs) != n:
            raise ValueError(f"{what}: expected {n} output and {n} input tensors, one per rank")
        dtypes = {t.dtype for t in outputs + inputs}
        if len(dtypes) != 1:
            raise ValueError(f"{what}: the tensors must have one dtype, not "
                             f"{', '.join(sorted(map(str, dtypes)))}")
        flat_in = torch.cat([t.reshape(-1) for t in inputs])
        ins = [t.numel() for t in inputs]
        outs = [t.numel() for t in outputs]

        def done(flat_out):
            at = 0
            for t in outputs:
                t.copy_(flat_out[at: at + t.numel()].view(t.shape))
                at += t.numel()

        return self._alltoall(what, flat_in, ins, outs, 1, done)

    def _alltoall(self, what, flat_in, ins, outs, row, done):
        """Every rank sends ins[j] rows of row elements of flat_in to rank j
        and receives outs[j] from rank j: first every rank learns every
        rank's sizes (one small allgather, so that all see the same
        mismatch), then the inputs, padded to the longest, are allgathered
        and each rank keeps its blocks."""
        n, me = self.conn.size, self.conn.rank
        sizes = self.conn.allgather(np.array(ins + outs, np.int64),
                                    name=_tensors.label(f"sizes of {what}"))
        sent, got = sizes[:, :n], sizes[:, n:]
        for j in range(n):
            for k in range(n):
                if sent[j, k] != got[k, j]:
                    raise _lib.make_error(
                        _lib.EMISMATCH, f"{what}: rank {j} sends {sent[j, k]} rows to rank {k}, "
                        f"which expects {got[k, j]} from it")
        longest = int(sent.sum(axis=1).max()) * row
        src = torch.zeros(max(longest, 1), dtype=flat_in.dtype)
        src[: flat_in.numel()] = flat_in
        flat = torch.empty((n, src.numel()), dtype=src.dtype)
        total = int(got[me].sum()) * row
        mine = torch.empty(total, dtype=src.dtype)

        def finish():
            with torch.no_grad():
                at = 0
                for j in range(n):
                    off = int(sent[j, :me].sum()) * row
                    k = int(sent[j, me]) * row
                    mine[at: at + k] = flat[j, off: off + k]
                    at += k
                done(mine)

        return self._gather_into(what, flat, src, finish)

    def allreduce_coalesced(self, tensors, op):
        what = "all_reduce_coalesced"
        self._list(tensors, what)
        if len({t.dtype for t in tensors}) > 1:
            raise ValueError(f"{what}: the tensors must have one dtype")
        if not tensors:
            return Work([])
        agree(self.conn, what, [(f"tensor {i}", t) for i, t in enumerate(tensors)])
        flat = torch.cat([t.reshape(-1) for t in tensors])

        def done():
            at = 0
            with torch.no_grad():
                for t in tensors:
                    t.copy_(flat[at: at + t.numel()].view(t.shape))
                    at += t.numel()

        return Work([self._reduce(_lib.COLL_ALLREDUCE, what, flat, None, op, (tensors, flat),
                                  done)])

    def allgather_coalesced(self, output_lists, inputs):
        what = "all_gather_coalesced"
        n = self.conn.size
        self._list(inputs, what)
        if len(output_lists) != n or any(
                len(outs) != len(inputs) or any(o.shape != i.shape or o.dtype != i.dtype
                                                 for o, i in zip(outs, inputs))
                for outs in output_lists):
            raise ValueError(f"{what}: expected {n} lists of tensors shaped like the inputs")
        if len({t.dtype for t in inputs}) > 1:
            raise ValueError(f"{what}: the tensors must have one dtype")
        agree(self.conn, what, [(f"tensor {i}", t) for i, t in enumerate(inputs)])
        src = torch.cat([t.reshape(-1) for t in inputs]) if inputs else torch.empty(0)
        flat = torch.empty((n, src.numel()), dtype=src.dtype)

        def done():
            with torch.no_grad():
                for outs, block in zip(output_lists, flat):
                    at = 0
                    for o in outs:
                        o.copy_(block[at: at + o.numel()].view(o.shape))
                        at += o.numel()

        return self._gather_into(what, flat, src, done)


# ---- the extension -------------------------------------------------------------------


def _extension():
    """The C++ module: $RINGD_TORCH_EXT, else installed with this package,
    else in the build tree of this checkout. Raises RuntimeError saying how
    to get it."""
    path = os.environ.get("RINGD_TORCH_EXT")
    if not path:
        try:
            return _checked(importlib.import_module(f"{__package__}.{EXTENSION}"))
        except ImportError:
            pass
        root = _lib.checkout_root()
        found = sorted(glob.glob(str(root / "build" / "client" / "python" / "torch_ext" /
                                     f"{EXTENSION}.*.so"))) if root else []
        if not found:
            raise RuntimeError(
                "the ringd backend of torch.distributed needs its C++ extension: from the "
                "Debian packages, apt-get install python3-ringd-torch; from a checkout, it "
                "is built with ringd when PyTorch's headers are installed (apt-get install "
                "libtorch-dev pybind11-dev python3-dev, then cmake again); or set "
                "RINGD_TORCH_EXT to its path. The rest of ringd.torch works without it."
            )
        path = found[0]
    spec = importlib.util.spec_from_file_location(EXTENSION, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return _checked(module)


def _checked(module):
    built = module.TORCH_VERSION.split(".")[:2]
    running = torch.__version__.split(".")[:2]
    if built != running:
        raise RuntimeError(
            f"{module.__file__} was built for torch {module.TORCH_VERSION}, but this is torch "
            f"{torch.__version__}: build ringd again against this torch"
        )
    return module


# ---- init_process_group -------------------------------------------------------------


def _agreeing(conn, rank, world_size, what):
    """Raises ValueError unless rank and world_size (-1: not given) and
    RANK, WORLD_SIZE, LOCAL_RANK in the environment agree with the daemon."""
    claims = [("rank", rank, conn.rank, "argument"), ("world_size", world_size, conn.size,
                                                      "argument")]
    for var, ours in (("RANK", conn.rank), ("WORLD_SIZE", conn.size),
                      ("LOCAL_RANK", conn.local_rank)):
        if os.environ.get(var, "").strip().lstrip("-").isdigit():
            claims.append((var, int(os.environ[var]), ours, "environment"))
    for label, given, ours, where in claims:
        if given is not None and given >= 0 and given != ours:
            raise ValueError(
                f"{what}: {label}={given} ({where}), but the ringd daemon at {conn.path} makes "
                f"this process rank {conn.rank} of {conn.size} (local rank {conn.local_rank} of "
                f"{conn.local_size}); ranks come from the daemons' configuration, in ring order: "
                f"leave {label} out or make it agree (python3 -m ringd.launch sets it so)"
            )


class _Subgroup:
    """The Backend of a subgroup: every collective fails, saying why. (The
    subgroup itself is made, so that new_group() returns on every rank.)"""

    def __init__(self, size, ring):
        self.message = (f"ringd: a process group of {size} of the ring's {ring} ranks: ringd "
                        "runs collectives over the whole ring, not subgroups")

    def __getattr__(self, name):
        def refuse(*args):
            raise ValueError(self.message)

        return refuse


def _create_process_group(store, rank, world_size, timeout):
    """dist.Backend's creator for "ringd"."""
    conn = _core.connect()
    if world_size != conn.size:
        return _extension().ProcessGroupRingd(_Subgroup(world_size, conn.size), rank, world_size)
    _agreeing(conn, rank, world_size, "init_process_group('ringd')")
    return _extension().ProcessGroupRingd(Backend(conn), conn.rank, conn.size)


_UNSHARED = (
    "ringd's store holds no {keys}: the store of init_process_group('ringd') without an "
    "address shares nothing between ranks, and a group of another backend "
    "(new_group(backend='gloo')) needs a store they share: set MASTER_ADDR and MASTER_PORT "
    "(rank 0's host and a free port; then torch's env:// store is used, ranks still the "
    "daemons'), or give init_process_group an init_method such as 'tcp://HOST:PORT'")


class Store(dist.Store):
    """The store of "ringd://": add(key, n) is an allreduce of n over the
    ring, returning the sum of every rank's adds to key so far, so every
    rank must make the same add() calls in the same order (as the barrier
    at the end of init_process_group does). The rest is local to the
    process."""

    def __init__(self, conn):
        super().__init__()
        self.conn = conn
        self.values = {}

    def add(self, key, value):
        total = self.conn.allreduce(np.array([value], np.int64), name=_tensors.label(f"store {key}"))
        self.values[key] = int(self.values.get(key, 0)) + int(total[0])
        return self.values[key]

    def set(self, key, value):
        self.values[key] = value

    def get(self, key):
        if key not in self.values:
            raise KeyError(_UNSHARED.format(keys=repr(key)))
        value = self.values[key]
        return value if isinstance(value, bytes) else str(value).encode()

    def check(self, keys):
        return all(k in self.values for k in keys)

    def wait(self, keys, timeout=None):
        if not self.check(keys):
            raise KeyError(_UNSHARED.format(keys=keys))

    def num_keys(self):
        return len(self.values)

    def delete_key(self, key):
        return self.values.pop(key, None) is not None


_stores = []  # the Python halves of the stores C++ holds: kept alive here


def _rendezvous(url, timeout=None, **kwargs):
    """The "ringd://" init method: the daemon's rank and world size, checked
    against those in the URL (from init_process_group's arguments)."""
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(url).query))
    conn = _core.connect()
    _agreeing(conn, int(query.get("rank", -1)), int(query.get("world_size", -1)),
              "init_process_group('ringd')")
    store = Store(conn)
    _stores.append(store)
    yield store, conn.rank, conn.size
    raise RuntimeError("ringd:// does not rendezvous twice")


def _with_ringd_init_method(init_process_group):
    """init_process_group, for the ringd backend when neither an init_method
    nor a store is given: with MASTER_ADDR and MASTER_PORT set, torch's
    env:// (a TCPStore on rank 0 that every rank shares, which groups of
    other backends need), the rank and world size the daemons' where the
    environment has none; else "ringd://", which needs no address."""
    signature = inspect.signature(init_process_group)

    @functools.wraps(init_process_group)
    def wrapper(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        a = bound.arguments
        if (str(a.get("backend", "")).lower() == NAME and a.get("init_method") is None
                and a.get("store") is None):
            if os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
                a["init_method"] = "env://"
                conn = _core.connect()
                if a.get("rank", -1) == -1 and "RANK" not in os.environ:
                    a["rank"] = conn.rank
                if a.get("world_size", -1) == -1 and "WORLD_SIZE" not in os.environ:
                    a["world_size"] = conn.size
            else:
                a["init_method"] = "ringd://"
        return init_process_group(*bound.args, **bound.kwargs)

    wrapper._ringd = True
    return wrapper


def register():
    """Registers the backend, its init method and the init_process_group
    default with torch.distributed (once; nothing if torch has no
    torch.distributed)."""
    if not dist.is_available() or hasattr(dist.Backend, NAME.upper()):
        return
    dist.Backend.register_backend(NAME, _create_process_group)
    dist.register_rendezvous_handler(NAME, _rendezvous)
    from torch.distributed import distributed_c10d

    if not getattr(dist.init_process_group, "_ringd", False):
        wrapped = _with_ringd_init_method(distributed_c10d.init_process_group)
        dist.init_process_group = distributed_c10d.init_process_group = wrapped
