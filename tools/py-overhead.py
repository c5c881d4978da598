#!/usr/bin/env python3
"""The Python binding's calls timed as their C references time them.

Run by every rank (shs-launch -n 4 -- python3 tools/py-overhead.py KIND ...),
rank 0 prints one JSON line in the C tool's terms:

  allreduce COUNT ITERS WARMUP   Collective.allreduce of COUNT float32 in a
                                 registered region (zero-copy), as
                                 shs-allreduce-bench -m region: every rank
                                 times each call, the times averaged over the
                                 ranks; p50 of those
  sync COUNT ITERS WARMUP        Shadow.sync() (FR-MA, all ranks, pull) of a
                                 COUNT-float model, as shs-sync-bench
  lookup ROWS DIM BATCH ITERS WARMUP
                                 EmbeddingWorker.lookup of BATCH uniform ids,
                                 as shs-emb-bench --mode lookup: rank 0's own
                                 per-call times, p50

tools/python-overhead runs each next to its C reference in one guest.
"""
import json
import math
import sys
import time

import numpy as np

import shadowsync


def percentiles(times):
    t = sorted(times)
    k99 = max(math.ceil(0.99 * len(t)) - 1, 0)
    return {"mean_us": sum(t) / len(t), "p50_us": t[(len(t) - 1) // 2], "p99_us": t[k99]}


def averaged(ctx, times):
    """Each call's time averaged over the ranks (the C tools' way)."""
    t = np.array(times, dtype=np.float64)
    coll = shadowsync.Collective(ctx, stage_bytes=max(t.nbytes, 64))
    coll.allreduce(t, "avg")
    coll.close()
    return list(t)


def timed(fn, iters, warmup, ctx):
    for _ in range(warmup):
        fn()
    ctx.barrier()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return times


def bench_allreduce(ctx, count, iters, warmup):
    region = ctx.alloc(count * 4)
    x = np.frombuffer(region, dtype=np.float32)
    x[:] = ctx.rank
    coll = shadowsync.Collective(ctx)
    times = averaged(ctx, timed(lambda: coll.allreduce(x, "sum"), iters, warmup, ctx))
    coll.close()
    x = None  # the view goes before the region closes
    region.close()
    return times


def bench_sync(ctx, count, iters, warmup):
    region = ctx.alloc(count * 4, remote_read=True)
    w = np.frombuffer(region, dtype=np.float32)
    w[:] = (np.arange(count) % 97) * 0.01 + ctx.rank
    sh = shadowsync.Shadow(ctx, region, algorithm="ma")
    times = averaged(ctx, timed(sh.sync, iters, warmup, ctx))
    sh.close()
    w = None
    region.close()
    return times


def bench_lookup(ctx, rows, dim, batch, iters, warmup):
    table = shadowsync.EmbeddingTable(ctx, rows, dim, max_batch=batch, workers=1)
    worker = table.worker(0)
    g = np.random.default_rng(1000 + ctx.rank)
    ids = [g.integers(0, rows, batch, dtype=np.uint64) for _ in range(iters + warmup)]
    out = np.empty((batch, dim), dtype=np.float32)
    it = iter(ids)
    times = timed(lambda: worker.lookup(next(it), out), iters, warmup, ctx)
    ctx.barrier()
    table.close()
    return times


def main(argv):
    kind, nums = argv[0], [int(a) for a in argv[1:]]
    ctx = shadowsync.Context()
    if kind == "allreduce":
        times = bench_allreduce(ctx, *nums)
    elif kind == "sync":
        times = bench_sync(ctx, *nums)
    elif kind == "lookup":
        times = bench_lookup(ctx, *nums)
    else:
        print(f"py-overhead: unknown kind {kind}", file=sys.stderr)
        return 2
    if ctx.rank == 0:
        print(json.dumps(dict(kind=kind, args=nums, **percentiles(times))), flush=True)
    ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
