"""DistributedOptimizer: an optimizer whose step() uses the gradients
averaged over all ranks, reduced while the backward pass still runs.

Gradients go in buckets: runs of parameters of one dtype, taken in reverse
order (the order in which backward produces their gradients), packed into a
buffer shared with the daemon of up to fusion_bytes each. A hook on each
parameter's gradient accumulator counts the backward passes; when a
parameter's gradient is final (after backward_passes_per_step passes), it
counts towards its bucket, and a bucket whose parameters are all final is
packed and its allreduce submitted at once, so the ring reduces it while
autograd computes the gradients of the layers before. Buckets are submitted
in their fixed order, each only after the ones before it: every rank submits
the same collectives in the same order, whatever order the hooks fire in.
step() submits what the hooks did not (parameters without a gradient this
time contribute zeros), waits for every bucket and unpacks the averages into
the gradients. With overlap=False everything happens in step(), from the
same buckets, so both ways give the same bits.
"""

import atexit
import contextlib
import sys
import weakref

import torch

from .. import _core, _lib, _report
from . import _tensors
from ._tensors import agree, conn_of, label

# Default bucket size: small enough that the first buckets go round the ring
# while most of the backward pass is still ahead (bench/RESULTS.md, overlap),
# large enough that a bucket's time is mostly bandwidth. (Buckets submitted
# together are fused by the daemon anyway, fusion_threshold.)
BUCKET_BYTES = 2 << 20


def _round_up(n, a=64):
    return (n + a - 1) // a * a


class _Bucket:
    """Gradients of one dtype packed into one shared buffer."""

    __slots__ = ("dtype", "code", "params", "offsets", "nbytes", "base", "label", "final",
                 "request")

    def __init__(self, dtype):
        self.dtype = dtype
        self.code = _tensors.dtype_code(dtype)
        self.params = []
        self.offsets = []
        self.nbytes = 0
        self.base = 0  # where the bucket starts in the layout's shared buffer
        self.label = ""
        self.final = 0  # parameters whose gradient is final for this step
        self.request = None  # its allreduce, from submission to synchronize()


class _Layout:
    """The buckets of a set of parameters, and which bucket each is in."""

    def __init__(self, params, names, bucket_bytes):
        self.key = tuple((id(p), p.dtype, p.numel()) for p in params)
        self.buckets = []
        self.bucket_of = {}
        open_ = {}
        for p in reversed(params):
            nb = p.numel() * p.element_size()
            b = open_.get(p.dtype)
            if b is None or (b.params and _round_up(b.nbytes) + nb > bucket_bytes):
                b = open_[p.dtype] = _Bucket(p.dtype)
                self.buckets.append(b)
            b.offsets.append(_round_up(b.nbytes))
            b.params.append(p)
            b.nbytes = b.offsets[-1] + nb
            self.bucket_of[id(p)] = b
        self.nbytes = 0  # of one shared buffer holding every bucket
        for i, b in enumerate(self.buckets):
            first, last = names.get(id(b.params[0]), "?"), names.get(id(b.params[-1]), "?")
            b.label = label(f"grads#{i} {first}..{last}")
            b.base = self.nbytes
            self.nbytes = _round_up(b.base + b.nbytes)
        self.next = 0  # the next bucket to submit


class _DistributedOptimizerMixin:
    """Methods added to the class of the wrapped optimizer."""

    def _ringd_setup(self, named_parameters, op, bucket_bytes, passes, overlap, conn, weight,
                     balance):
        if int(passes) < 1:
            raise ValueError(f"DistributedOptimizer: backward_passes_per_step must be >= 1, "
                             f"got {passes}")
        if balance is not None:
            if _core.parse_op(op) not in (_lib.MEAN, _lib.WMEAN) or weight is not None:
                raise ValueError("DistributedOptimizer: balance= combines the gradients by "
                                 "their rows (op 'wmean'); it takes no other op, nor weight=")
            if int(passes) != 1:
                raise ValueError("DistributedOptimizer: balance= takes one backward pass per "
                                 "step (backward_passes_per_step=1)")
            op = "wmean"
            conn = balance.conn if conn is None else conn
        self._ringd_balance = balance
        self._ringd_conn = conn
        self._ringd_op = _core.parse_op(op)
        self._ringd_bucket_bytes = int(bucket_bytes)
        self._ringd_passes = int(passes)
        self._ringd_overlap = bool(overlap)
        self._ringd_layout = None
        self._ringd_counts = {}  # id(p) -> backward passes since the last step
        self._ringd_hooked = {}  # id(p) -> (accumulator node, hook handle)
        self._ringd_buffer = None  # shared with the daemon: every bucket, one after the other
        self._ringd_synced = False
        self._ringd_in_step = False
        self.ringd_weight = weight
        ids = {id(p) for g in self.param_groups for p in g["params"]}
        names = {}
        if named_parameters is not None:
            for name, p in named_parameters:
                if name in names.values():
                    raise ValueError(f"DistributedOptimizer: parameter name {name!r} appears twice")
                names[id(p)] = name
            unnamed = [i for i in ids if i not in names]
            if unnamed:
                raise ValueError(
                    f"DistributedOptimizer: {len(unnamed)} parameter(s) of the optimizer are "
                    "missing from named_parameters"
                )
        else:
            names = {
                id(p): f"param_groups[{g}][{j}]"
                for g, group in enumerate(self.param_groups)
                for j, p in enumerate(group["params"])
            }
        self._ringd_names = names
        if self._ringd_op == _lib.WMEAN and weight is None and balance is None:
            raise ValueError("DistributedOptimizer: op 'wmean' needs weight= (or set ringd_weight)")
        if self._ringd_overlap:
            self._ringd_hook_params()

    # ---- the parameters, their buckets and hooks ----

    def _ringd_params(self):
        return [p for g in self.param_groups for p in g["params"] if p.requires_grad and p.numel()]

    def _ringd_hook_params(self):
        """A hook on the gradient accumulator of each parameter not yet hooked
        (the accumulator is kept: autograd holds it only weakly)."""
        me = weakref.ref(self)
        for p in self._ringd_params():
            if id(p) in self._ringd_hooked:
                continue
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            pref = weakref.ref(p)

            def hook(*_, pref=pref):
                opt = me()
                if opt is not None:
                    opt._ringd_gradient_ready(pref())

            self._ringd_hooked[id(p)] = (acc, acc.register_hook(hook))

    def _ringd_current_layout(self):
        """The layout of the current parameters (between steps): the same
        object as long as they do not change; a new one is checked on every
        rank first."""
        params = self._ringd_params()
        layout = self._ringd_layout
        if layout is not None and layout.key == tuple((id(p), p.dtype, p.numel()) for p in params):
            return layout
        layout = _Layout(params, self._ringd_names, self._ringd_bucket_bytes)
        named = [(self._ringd_names.get(id(p), "?"), p) for p in params]
        agree(conn_of(self._ringd_conn), "DistributedOptimizer", named)
        self._ringd_layout = layout
        if self._ringd_overlap:
            self._ringd_hook_params()
        return layout

    # ---- during backward ----

    def _ringd_gradient_ready(self, p):
        """The hook: p's gradient has just been accumulated."""
        if p is None or self._ringd_in_step or not p.requires_grad or not p.numel():
            return
        n = self._ringd_counts.get(id(p), 0) + 1
        if n > self._ringd_passes:
            raise RuntimeError(
                f"DistributedOptimizer: the gradient of {self._ringd_names.get(id(p), '?')} was "
                f"computed {n} times before step() (backward_passes_per_step="
                f"{self._ringd_passes}); raise backward_passes_per_step to accumulate gradients "
                "over several backward passes"
            )
        self._ringd_counts[id(p)] = n
        if n < self._ringd_passes:
            return
        layout = self._ringd_layout or self._ringd_current_layout()
        b = layout.bucket_of.get(id(p))
        if b is None:
            return
        b.final += 1
        while layout.next < len(layout.buckets):
            b = layout.buckets[layout.next]
            if b.final < len(b.params):
                break
            self._ringd_submit(layout.next, b)
            layout.next += 1

    def _ringd_submit(self, i, b):
        """Packs bucket i's gradients (zeros where there is none) and submits
        its allreduce."""
        c = conn_of(self._ringd_conn)
        buf = self._ringd_bucket(c, b)
        with torch.no_grad():
            for p, off in zip(b.params, b.offsets):
                dst = buf[off : off + p.numel() * p.element_size()].view(b.dtype)
                if p.grad is None:
                    dst.zero_()
                elif p.grad.layout != torch.strided:
                    raise TypeError("DistributedOptimizer: sparse gradients are not supported")
                else:
                    dst.copy_(p.grad.reshape(-1))
        if self._ringd_balance is not None:
            self.ringd_weight = self._ringd_balance.weight  # this step's rows
        weight = self.ringd_weight if self._ringd_op == _lib.WMEAN else None
        b.request = c._submit_ptr(
            _lib.COLL_ALLREDUCE, "DistributedOptimizer", buf=buf.data_ptr(),
            count=b.nbytes // _lib.DTYPE_SIZES[b.code], code=b.code, op=self._ringd_op,
            weight=weight, keep=buf, name=b.label,
        )

    def _ringd_bucket(self, c, b):
        """Bucket b's part of the shared buffer, which is kept from step to
        step (one region of shared memory for all buckets)."""
        need = self._ringd_layout.nbytes
        if self._ringd_buffer is None or self._ringd_buffer.numel() < need:
            self._ringd_buffer = _tensors.empty(need, torch.uint8, conn=c)
        return self._ringd_buffer[b.base : b.base + b.nbytes]

    # ---- at step() ----

    def synchronize(self):
        """Averages (op) the gradients over all ranks now: submits the
        buckets the backward pass did not, waits for all, and sets each
        parameter's gradient to the average. A parameter without a gradient
        contributes zeros and gets the result as its gradient, so that every
        replica takes the same step."""
        if self._ringd_balance is not None:
            self._ringd_balance.done()  # this rank's compute of the step is over
        layout = self._ringd_layout
        if layout is None or not layout.next:
            layout = self._ringd_current_layout()
        errors = []
        try:
            for i in range(layout.next, len(layout.buckets)):
                self._ringd_submit(i, layout.buckets[i])
                layout.next = i + 1
        finally:
            # Every submitted bucket completes before its buffer can be
            # packed again, errors or not.
            for i, b in enumerate(layout.buckets):
                if b.request is None:
                    continue
                try:
                    b.request.wait()
                except Exception as e:  # noqa: BLE001 - the first is raised below
                    errors.append(e)
                b.request = None
                if errors:
                    continue
                buf = self._ringd_bucket(None, b)
                with torch.no_grad():
                    for p, off in zip(b.params, b.offsets):
                        nb = p.numel() * p.element_size()
                        src = buf[off : off + nb].view(b.dtype).view_as(p)
                        if p.grad is None:
                            p.grad = src.clone()
                        else:
                            p.grad.copy_(src)
            for b in layout.buckets:
                b.final = 0
            layout.next = 0
            self._ringd_counts.clear()
        if errors:
            raise errors[0]
        # Parameters added since (add_param_group) get buckets and hooks
        # before the next backward pass.
        self._ringd_current_layout()
        self._ringd_synced = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside this block does not average (after an explicit
        synchronize(), e.g. to clip the averaged gradients)."""
        self._ringd_synced = True
        yield

    def zero_grad(self, *args, **kwargs):
        layout = self._ringd_layout
        if layout is not None and layout.next:
            raise RuntimeError(
                "DistributedOptimizer: zero_grad() between backward() and step(): the "
                "gradients on their way round the ring would be lost; call step() (or "
                "synchronize()) first"
            )
        return super(self.__class__, self).zero_grad(*args, **kwargs)

    def step(self, closure=None):
        if not self._ringd_synced:
            self.synchronize()
        self._ringd_synced = False
        self._ringd_in_step = True  # a closure's backward pass is not averaged
        try:
            return super(self.__class__, self).step(closure)
        finally:
            self._ringd_in_step = False


_reporting = set()  # the sockets whose report is due at exit


def _report_at_exit(path):
    """At the end of the job, rank 0 prints where the ring's ranks spent
    their time, once the other hosts' last ranks have left too (or after a
    second and a half: the job as the daemons know it then)."""
    try:
        line = _report.report_line(_report.final_report(path, timeout=1.5))
    except Exception as e:  # at exit: say it, never raise
        line = f"no report: {e}"
    print(f"ringd: {line}", file=sys.stderr, flush=True)


def DistributedOptimizer(
    optimizer, named_parameters=None, op="mean", *, backward_passes_per_step=1,
    bucket_bytes=BUCKET_BYTES, overlap=True, conn=None, weight=None, fusion_bytes=None,
    balance=None,
    report=False,
):
    """Wraps optimizer so that step() uses the gradients averaged over all
    ranks (op "mean"; "sum"; or "wmean" with weight=, or the attribute
    ringd_weight set before backward(), say to the batch size).

    balance: a ringd.balance.Balancer whose slice() gives this rank its rows
    of each step (ringd.torch.BalancedSampler calls it): the gradients are
    then combined by "wmean" with weight = the rank's rows, which makes them
    the mean gradient of the whole global batch (for a loss that is the mean
    over the rank's rows, as PyTorch's losses are by default), and
    synchronize() calls balance.done() first, stopping the rank's clock.

    The gradients are reduced in buckets of up to bucket_bytes (fusion_bytes
    is its former name), each as soon as the backward pass has produced its
    gradients, overlapping the ring's work with the rest of the backward
    pass (overlap=False: all in step(); the same results, bit for bit).
    backward_passes_per_step=k accumulates the gradients of k backward
    passes locally (summed, as autograd does) and reduces them on the k-th.
    named_parameters (e.g. model.named_parameters()) names the parameters in
    error messages and is checked to cover the optimizer's parameters; the
    parameters' names, shapes and dtypes are checked to agree between ranks.

    The result is an instance of a subclass of the optimizer's class sharing
    the optimizer's state, so LR schedulers and state_dict() work on it.
    synchronize() reduces now (to clip the averaged gradients, say, then
    step() inside skip_synchronize()). Gradients computed inside a
    step(closure) are not averaged. report=True: when the process exits,
    rank 0 prints one line saying where the ring's ranks spent their time
    (ringd.report_line(): compute, wait, transfer, failure, speedup, who
    made the others wait most, energy)."""
    base = optimizer.__class__
    methods = {
        k: v
        for k, v in _DistributedOptimizerMixin.__dict__.items()
        if k not in ("__dict__", "__weakref__")
    }
    cls = type(base.__name__, (base,), methods)
    opt = cls.__new__(cls)
    opt.__dict__.update(optimizer.__dict__)
    opt._ringd_setup(
        list(named_parameters) if named_parameters is not None else None, op,
        bucket_bytes if fusion_bytes is None else fusion_bytes, backward_passes_per_step,
        overlap, conn, weight, balance,
    )
    c = conn_of(conn) if report else None
    if c is not None and c.rank == 0 and c.path not in _reporting:  # one line, once
        _reporting.add(c.path)
        atexit.register(_report_at_exit, c.path)
    return opt
