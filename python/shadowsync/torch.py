"""shadowsync for PyTorch: registered tensors, modules whose parameters live
in registered memory, allreduce on tensors, and a sharded EmbeddingBag.

    import shadowsync, shadowsync.torch as shs
    ctx = shadowsync.Context()                          # from torchrun's environment
    reg = shs.register_module(ctx, model.dense)          # parameters -> one region
    sync = shadowsync.ShadowSync(ctx, reg)               # S-MA in the background
    emb = shs.ShardedEmbeddingBag(ctx, 10**6, 16, workers=2)
"""
import threading

import torch

from . import Collective, EmbeddingTable, Region  # noqa: F401

__all__ = ["as_tensor", "register_module", "RegisteredModule", "allreduce",
           "ShardedEmbeddingBag"]


def as_tensor(region, dtype=torch.float32, count=-1, offset=0):
    """A 1-D CPU tensor viewing the region's memory (no copy): count
    elements of dtype from byte offset (-1: all that fit). The region
    cannot be closed while the tensor lives."""
    if not isinstance(region, Region):
        raise TypeError(f"as_tensor: a shadowsync.Region, not {type(region).__name__}")
    return torch.frombuffer(region, dtype=dtype, count=count, offset=offset)


class RegisteredModule:
    """A module whose float32 parameters were moved into one registered
    region (register_module): .region, .flat (a tensor over all of it),
    .module, .numel. check() raises RuntimeError if a parameter no longer
    views the region (something replaced or reallocated it)."""

    def __init__(self, module, region, flat, spans):
        self.module = module
        self.region = region
        self.flat = flat
        self.numel = flat.numel()
        self._spans = spans  # (name, parameter, data_ptr, offset, numel)

    def check(self):
        """Every parameter still a view of its span of the region."""
        named = dict(self.module.named_parameters())
        for name, p, ptr, off, n in self._spans:
            if named.get(name) is not p:
                raise RuntimeError(f"shadowsync: parameter {name!r} was replaced after "
                                   "register_module; the shadow engine would sync stale memory")
            if p.data.data_ptr() != ptr or p.data.numel() != n:
                raise RuntimeError(f"shadowsync: parameter {name!r} no longer views the "
                                   "registered region (reallocated, e.g. by .to(), "
                                   "resize_ or a load_state_dict with assign): register again")

    def close(self):
        """Give every parameter its own memory again and close the region."""
        for _, p, _, _, _ in self._spans:
            p.data = p.data.clone()
        self.flat = None
        self.region.close()


def register_module(ctx, module):
    """Move the module's dense parameters into one registered float32
    region and make each parameter.data a view into it, so that optimizers,
    state_dict and autograd keep working while the shadow engine and
    allreduce read the memory directly. Collective (every rank registers a
    module of the same size). Only float32 CPU parameters (TypeError
    otherwise); buffers (BatchNorm's running statistics) stay where they are."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"register_module: a torch.nn.Module, not {type(module).__name__}")
    params = [(n, p) for n, p in module.named_parameters()]
    if not params:
        raise ValueError("register_module: the module has no parameters")
    for n, p in params:
        if p.dtype != torch.float32 or p.device.type != "cpu":
            raise TypeError(f"register_module: parameter {n!r} is {p.dtype} on {p.device}; "
                            "only float32 CPU parameters can be registered")
    total = sum(p.numel() for _, p in params)
    region = ctx.alloc(4 * total)
    flat = as_tensor(region)
    spans = []
    off = 0
    with torch.no_grad():
        for n, p in params:
            k = p.numel()
            view = flat[off:off + k].view_as(p)
            view.copy_(p.data)
            p.data = view
            spans.append((n, p, p.data.data_ptr(), off, k))
            off += k
    return RegisteredModule(module, region, flat, spans)


def _check_tensor(t, what, dtypes):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what}: a torch.Tensor, not {type(t).__name__}")
    if t.device.type != "cpu":
        raise TypeError(f"{what}: the tensor is on {t.device}; shadowsync moves CPU memory")
    if t.dtype not in dtypes:
        raise TypeError(f"{what}: dtype {t.dtype} not accepted (want one of "
                        f"{', '.join(str(d) for d in dtypes)})")
    if not t.is_contiguous():
        raise ValueError(f"{what}: the tensor is not contiguous; pass t.contiguous()")


def allreduce(coll, tensor, op="sum", group=None):
    """Reduce a contiguous float32/float64 CPU tensor over the ranks (or
    group) in place with coll (a shadowsync.Collective): zero-copy when the
    tensor views a registered region (as_tensor, a registered module's
    parameters), staged otherwise. Returns the tensor."""
    _check_tensor(tensor, "allreduce", (torch.float32, torch.float64))
    coll.allreduce(tensor.detach().numpy(), op, group=group)
    return tensor


class _Lookup(torch.autograd.Function):
    """Forward: the pooled rows of each bag. Backward: each id's row
    gradient (its bag's output gradient, divided by the bag's size for
    'mean') goes to the row's holder; no dense gradient of the table is
    ever made."""

    @staticmethod
    def forward(ctx, trigger, bag, ids, bag_of, scale, prefetched, nbags):
        out = bag._pooled(ids, bag_of, scale, prefetched, nbags)
        ctx.bag = bag
        ctx.save_for_backward(ids, bag_of, scale)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        ids, bag_of, scale = ctx.saved_tensors
        grads = grad_out.index_select(0, bag_of) * scale.unsqueeze(1)
        ctx.bag._worker().update(ids.numpy(), grads.contiguous().numpy())
        return None, None, None, None, None, None, None


class ShardedEmbeddingBag(torch.nn.Module):
    """torch.nn.EmbeddingBag over a table sharded across the ranks
    (shadowsync.EmbeddingTable): forward looks up and pools the rows of a
    batch of bags, backward sends the row gradients to the rows' holders,
    which apply the optimizer ('sgd': w -= lr * g, or row-wise 'adagrad')
    when they arrive. The module holds no parameter of the table: a torch
    optimizer never sees it, and no dense gradient is ever materialized.

    Inputs as EmbeddingBag's: a 2-D LongTensor of fixed-size bags, or a 1-D
    LongTensor with offsets (the start of each bag). mode 'sum' or 'mean'.
    Each thread that calls it gets its own worker (up to `workers`,
    RuntimeError beyond). prefetch(input, offsets) starts the next batch's
    lookup so that it travels while the current batch computes; the next
    forward with the same ids completes it. flush() waits until every
    update this rank sent is applied; call it (then a barrier) before
    reading results that must include every update.

    Backward runs through `trigger`, a tensor that requires grad: with
    loss.backward() nothing more is needed; worker threads that take
    torch.autograd.grad(loss, params) instead (their own gradients, no
    shared .grad) add it, torch.autograd.grad(loss, params + [bag.trigger],
    allow_unused=True), so that the row gradients are sent.

    Creating it is collective (every rank passes the same sizes)."""

    def __init__(self, ctx, num_embeddings, embedding_dim, mode="sum", optimizer="sgd",
                 lr=0.01, init_scale=0.01, seed=0, max_batch=4096, workers=1, **kw):
        super().__init__()
        if mode not in ("sum", "mean"):
            raise ValueError(f"ShardedEmbeddingBag: mode 'sum' or 'mean', not {mode!r}")
        self.mode = mode
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.table = EmbeddingTable(ctx, num_embeddings, embedding_dim, optimizer=optimizer,
                                    lr=lr, init_scale=init_scale, seed=seed,
                                    max_batch=max_batch, workers=workers, **kw)
        self.trigger = torch.empty(0, requires_grad=True)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._next_worker = 0
        self._workers = []

    def _worker(self):
        w = getattr(self._local, "worker", None)
        if w is None:
            with self._lock:
                if self._next_worker >= self.table.workers:
                    raise RuntimeError(f"ShardedEmbeddingBag: {self.table.workers} worker(s), "
                                       "all taken by other threads: create it with more")
                w = self.table.worker(self._next_worker)
                self._next_worker += 1
                self._workers.append(w)
            self._local.worker = w
            self._local.pending = None
        return w

    def _bags(self, input, offsets):
        _check_tensor(input, "ShardedEmbeddingBag", (torch.int64,))
        if input.dim() == 2:
            if offsets is not None:
                raise ValueError("ShardedEmbeddingBag: offsets go with a 1-D input only")
            nbags, per = input.shape
            ids = input.reshape(-1)
            bag_of = torch.arange(nbags).repeat_interleave(per)
            sizes = torch.full((nbags,), per, dtype=torch.int64)
        elif input.dim() == 1:
            if offsets is None:
                raise ValueError("ShardedEmbeddingBag: a 1-D input needs offsets")
            _check_tensor(offsets, "ShardedEmbeddingBag offsets", (torch.int64, torch.int32))
            ids = input
            nbags = offsets.numel()
            ends = torch.cat([offsets[1:].to(torch.int64),
                              torch.tensor([ids.numel()], dtype=torch.int64)])
            sizes = ends - offsets.to(torch.int64)
            if nbags == 0 or int(offsets[0]) != 0 or bool((sizes < 0).any()):
                raise ValueError("ShardedEmbeddingBag: offsets start at 0 and ascend")
            bag_of = torch.arange(nbags).repeat_interleave(sizes)
        else:
            raise ValueError(f"ShardedEmbeddingBag: input is 1-D or 2-D, not {input.dim()}-D")
        if ids.numel() > 0 and (int(ids.min()) < 0 or int(ids.max()) >= self.num_embeddings):
            raise ValueError(f"ShardedEmbeddingBag: ids must be in 0..{self.num_embeddings - 1}")
        scale = torch.ones(ids.numel())
        if self.mode == "mean":
            scale = 1.0 / sizes.clamp(min=1).to(torch.float32).index_select(0, bag_of)
        return ids.contiguous(), bag_of, scale, nbags

    def prefetch(self, input, offsets=None):
        """Start looking up the rows of this batch (the next forward's)."""
        ids, _, _, _ = self._bags(input, offsets)
        w = self._worker()
        if self._local.pending is not None:
            raise RuntimeError("ShardedEmbeddingBag.prefetch: a prefetched batch was not used")
        w.lookup_start(ids.numpy())
        self._local.pending = ids.clone()

    def _pooled(self, ids, bag_of, scale, prefetched, nbags):
        w = self._worker()
        rows = torch.empty(ids.numel(), self.embedding_dim)
        if prefetched:
            w.lookup_wait(rows.numpy())
        elif ids.numel() > 0:
            w.lookup(ids.numpy(), rows.numpy())
        out = torch.zeros(nbags, self.embedding_dim)
        return out.index_add_(0, bag_of, rows * scale.unsqueeze(1))

    def forward(self, input, offsets=None):
        ids, bag_of, scale, nbags = self._bags(input, offsets)
        self._worker()
        pending = self._local.pending
        prefetched = pending is not None and torch.equal(pending, ids)
        if pending is not None and not prefetched:
            # a prefetch of other ids: complete it into a scratch buffer, then look up
            self._local.worker.lookup_wait(torch.empty(pending.numel(), self.embedding_dim).numpy())
        self._local.pending = None
        return _Lookup.apply(self.trigger, self, ids, bag_of, scale, prefetched, nbags)

    def flush(self, timeout_ms=-1):
        """Wait until every update sent by this module's workers is applied."""
        for w in list(self._workers):
            w.flush(timeout_ms)

    def rows(self, ids):
        """The current rows of ids (a 1-D int64 tensor), as a (len, dim) tensor."""
        ids = torch.as_tensor(ids, dtype=torch.int64).contiguous()
        out = torch.empty(ids.numel(), self.embedding_dim)
        step = self.table.max_batch
        for i in range(0, ids.numel(), step):
            self._worker().lookup(ids[i:i + step].numpy(), out[i:i + step].numpy())
        return out

    def close(self):
        """Release the table (collective)."""
        self.table.close()
