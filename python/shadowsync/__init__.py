"""shadowsync: background model averaging, allreduce and sharded embedding
tables over RDMA, from Python.

    import shadowsync
    with shadowsync.Context() as ctx:               # rank/size from torchrun, mpirun, srun...
        region = ctx.alloc(4 * 1000)                 # registered memory (collective)
        x = shadowsync.as_array(region)              # a NumPy view, no copy
        x[:] = ctx.rank
        coll = shadowsync.Collective(ctx)
        coll.allreduce(x, "avg")                     # in place, zero-copy
        coll.close()
        del x
        region.close()

The names:
  Context             join the job (collective); rank, size, barrier, alloc, register
  Region              registered memory, a writable buffer (as_array, torch.frombuffer)
  Collective          ring allreduce in place ('sum', 'avg', groups)
  Shadow              the shadow engine on a Region (background start/stop, foreground sync)
  ShadowSync          the same on a Region or a torch module, with its checks
  ModelAverager       foreground averaging every `period` steps (PeriodicModelAverager's use)
  EmbeddingTable      a table sharded over the ranks; .worker(i) looks up and updates rows
  schedule            a DS-Sync schedule for Shadow/ShadowSync
  Error               the base of every library error; one subclass per status
                      (PeerFailed, Timeout, InvalidArgument, BadState, NoDevice, ...)
shadowsync.torch holds the torch side: register_module, as_tensor, allreduce,
ShardedEmbeddingBag.

Every call that can block releases the GIL; the shadow thread is the
library's own and never takes it. Library errors raise the exception of
their status with the library's words; bad arguments raise TypeError or
ValueError before anything is sent.
"""
from ._core import (  # noqa: F401
    BadState, Canceled, Collective, ConfigError, ConnectFailed, Context, DeviceError,
    EmbeddingTable, EmbeddingWorker, Error, InvalidArgument, IOFailed, NoDevice, NoMemory,
    NoResource, OutOfBounds, PeerFailed, ProtocolError, Region, RemoteAccess, Shadow,
    SizeMismatch, Timeout, TokenMismatch, TransportError, Unsupported, VersionMismatch,
    status_string)

__all__ = [
    "Context", "Region", "Collective", "Shadow", "ShadowSync", "ModelAverager",
    "EmbeddingTable", "EmbeddingWorker", "schedule", "as_array", "Error", "PeerFailed",
    "Timeout", "InvalidArgument", "BadState", "NoDevice", "NoMemory", "NoResource",
    "IOFailed", "DeviceError", "ConnectFailed", "RemoteAccess", "TransportError",
    "ProtocolError", "ConfigError", "TokenMismatch", "VersionMismatch", "SizeMismatch",
    "Unsupported", "OutOfBounds", "Canceled", "status_string",
]

_KINDS = ("all", "hypercube", "general", "random")


def schedule(kind, group_size=2, seed=0):
    """A DS-Sync schedule: each round, a rank syncs only inside its group of
    group_size ranks. kind: 'all' (every rank, every round), 'hypercube'
    (size a power of group_size), 'general' (any size), 'random' (groups from
    a permutation seeded by seed and the round). Pass it as schedule= to
    Shadow or ShadowSync."""
    if kind not in _KINDS:
        raise ValueError(f"schedule: kind is one of {_KINDS}, not {kind!r}")
    if not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"schedule: group_size is a positive int, not {group_size!r}")
    return (kind, group_size, int(seed))


def as_array(region, dtype="float32", count=None, offset=0):
    """A NumPy array viewing the region's memory (no copy): count elements
    of dtype from byte offset (default: all that fit). While the array
    lives, the region cannot be closed."""
    import numpy
    dt = numpy.dtype(dtype)
    if count is None:
        count = (region.nbytes - offset) // dt.itemsize
    return numpy.frombuffer(region, dtype=dt, count=count, offset=offset)


class ShadowSync:
    """Background (S-*) or foreground (FR-*) model averaging of a Region or
    of a torch module's dense parameters, with the other ranks.

        sync = shadowsync.ShadowSync(ctx, model, algorithm="ma")
        with sync:                      # start(): the shadow thread runs
            train(model)                # workers never wait for the network
        sync.finish()                   # every rank: the exact mean of the models
        sync.close()

    target: a shadowsync.Region (every float32 of it), a
    shadowsync.torch.RegisteredModule, or a torch.nn.Module, which is then
    registered (shadowsync.torch.register_module: collective). algorithm
    'ma', 'bmuf' or 'easgd'; schedule None or shadowsync.schedule(...);
    path 'pull' or 'ring' ('live' is refused); min_interval: the least seconds from one
    round's start to the next. Other keywords go to shadowsync.Shadow.
    Creating it is collective; so are finish() and close(). The thread is
    the library's: it never holds the GIL, and start/stop/sync release it.
    For a module, start() and sync() first check that every parameter still
    views the registered memory (RuntimeError names the one that does not).
    """

    def __init__(self, ctx, target, algorithm="ma", schedule=None, path="pull",
                 min_interval=0.0, **kw):
        self.registered = None
        if isinstance(target, Region):
            region = target
        else:
            from . import torch as shs_torch
            if not isinstance(target, shs_torch.RegisteredModule):
                target = shs_torch.register_module(ctx, target)
            self.registered = target
            region = target.region
        self.region = region
        self.engine = Shadow(ctx, region, algorithm=algorithm, schedule=schedule, path=path,
                             min_interval=min_interval, **kw)

    def _check(self):
        if self.registered is not None:
            self.registered.check()

    def start(self):
        """Start the shadow thread (not collective, but every rank should)."""
        self._check()
        self.engine.start()

    def stop(self):
        """Finish the current round and join the thread (bounded)."""
        self.engine.stop()

    def sync(self):
        """One foreground round now (FR-* modes: pause the workers first);
        every member of the group calls it for the same round. Blocks
        without the GIL."""
        self._check()
        self.engine.sync()

    def finish(self):
        """Collective end of the run: MA and BMUF leave every rank with the
        exact mean of the models (one ring allreduce)."""
        self.engine.finish()

    def stats(self):
        """A dict: rounds, syncs_per_min, round_us_mean, wait_us_mean, errors,
        last_error, failed_peers, staleness_ms_max, running, ..."""
        return self.engine.stats()

    def close(self):
        """Stop if running and release the engine (collective: a barrier)."""
        self.engine.close()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


class ModelAverager:
    """Foreground model averaging every `period` steps after `warmup_steps`,
    the pattern of torch's PeriodicModelAverager / PostLocalSGDOptimizer,
    over RDMA:

        averager = shadowsync.ModelAverager(ctx, model, period=4)
        for batch in data:
            loss(model, batch).backward(); opt.step()
            averager.average_parameters()   # every 4th call: the ranks' mean

    target as for ShadowSync (a module is registered: collective). Every rank
    calls average_parameters() equally often. Uses one Shadow engine in
    foreground rounds (algorithm 'ma' by default)."""

    def __init__(self, ctx, target, period, warmup_steps=0, algorithm="ma", **kw):
        if not isinstance(period, int) or period < 1:
            raise ValueError(f"ModelAverager: period is a positive int, not {period!r}")
        self.period = period
        self.warmup_steps = warmup_steps
        self.step = 0
        self.sync = ShadowSync(ctx, target, algorithm=algorithm, **kw)

    def average_parameters(self, params=None):
        """Count a step; on every period-th step after the warm-up, one
        foreground round. params is accepted for torch's signature and must
        be the registered module's parameters (they are what is averaged)."""
        self.step += 1
        if self.step > self.warmup_steps and (self.step - self.warmup_steps) % self.period == 0:
            self.sync.sync()
            return True
        return False

    def close(self):
        """Release the engine (collective)."""
        self.sync.close()
