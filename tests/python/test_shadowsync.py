"""The shadowsync package without torch: context, regions, allreduce, the
shadow engine, tables, errors, the GIL.

Run by every rank of a job (shs-launch -n 4 -- python3 -m pytest ...): the
tests are collective and run in file order on every rank. Asserts
behaviour, never speed.
"""
import os
import threading
import time

import numpy as np
import pytest

import shadowsync


def rank_data(rank, n, seed=7):
    return np.random.default_rng(seed * 1000 + rank).standard_normal(n).astype(np.float32)


def test_context_from_launcher(ctx):
    assert ctx.size == int(os.environ["SHS_SIZE"])
    assert ctx.rank == int(os.environ["SHS_RANK"])
    assert ctx.rejoined is False  # started with the job
    ctx.barrier()


def test_region_is_a_zero_copy_buffer(ctx):
    r = ctx.alloc(4096)
    a = shadowsync.as_array(r)
    b = np.frombuffer(r, dtype=np.float32)
    assert a.size == 1024 and not a.any()  # zeroed
    a[3] = 2.5
    assert b[3] == 2.5 and memoryview(r).cast("f")[3] == 2.5
    with pytest.raises(BufferError, match="in use"):
        r.close()  # views are alive
    del a, b
    r.close()
    assert r.closed and r.nbytes == 0
    r.close()  # twice: nothing


@pytest.mark.parametrize("n", [1, 1000, 100_003])
def test_allreduce_equals_the_reference_sum(ctx, coll, n):
    # staged (plain NumPy memory) and zero-copy (a region)
    mine = rank_data(ctx.rank, n)
    ref = sum(rank_data(r, n).astype(np.float64) for r in range(ctx.size))
    x = mine.copy()
    assert coll.allreduce(x) is x
    np.testing.assert_allclose(x, ref, rtol=1e-5, atol=1e-5)
    region = ctx.alloc(4 * n)
    y = shadowsync.as_array(region)
    y[:] = mine
    coll.allreduce(y, "avg")
    np.testing.assert_allclose(y, ref / ctx.size, rtol=1e-5, atol=1e-5)
    del y
    region.close()


def test_bf16_wire_within_its_bound(ctx):
    # collective.h, Wire: n (2^-8 + 2^-23) (1 + 2^-7)^n sum |x|; identical everywhere
    n, size = 10_007, ctx.size
    coll = shadowsync.Collective(ctx, wire="bf16")
    xs = [rank_data(r, n) for r in range(size)]
    x = xs[ctx.rank].copy()
    coll.allreduce(x)
    exact = sum(v.astype(np.float64) for v in xs)
    bound = size * (2.0 ** -8 + 2.0 ** -23) * (1 + 2.0 ** -7) ** size \
        * sum(np.abs(v.astype(np.float64)) for v in xs)
    assert (np.abs(x - exact) <= bound).all()
    assert not np.array_equal(x, exact.astype(np.float32))  # it did round
    # bf16 values: the low 16 bits are zero on every rank
    assert not (x.view(np.uint32) & 0xffff).any()
    with pytest.raises(ValueError, match="wire is"):
        shadowsync.Collective(ctx, wire="fp8")
    coll.close()


def test_allreduce_in_a_group(ctx, coll):
    group = [0, 1] if ctx.rank < 2 else list(range(2, ctx.size))
    x = np.full(10, float(ctx.rank + 1), dtype=np.float64)
    coll.allreduce(x, "sum", group=group)
    assert (x == sum(r + 1 for r in group)).all()


def test_bad_arguments_raise_and_change_nothing(ctx, coll):
    x = np.arange(8, dtype=np.float32)
    before = x.copy()
    with pytest.raises(TypeError, match="element type"):
        coll.allreduce(np.arange(8, dtype=np.int32))
    with pytest.raises(ValueError, match="not contiguous"):
        coll.allreduce(np.arange(16, dtype=np.float32)[::2])
    ro = np.arange(8, dtype=np.float32)
    ro.setflags(write=False)
    with pytest.raises(TypeError, match="read-only"):
        coll.allreduce(ro)
    with pytest.raises(TypeError, match="expected a buffer"):
        coll.allreduce([1.0, 2.0])
    with pytest.raises(ValueError, match="op is"):
        coll.allreduce(x, "max")
    with pytest.raises(ValueError, match="not in it"):
        coll.allreduce(x, group=[r for r in range(ctx.size) if r != ctx.rank])
    with pytest.raises(TypeError):
        shadowsync.Shadow(ctx, x)  # not registered memory
    with pytest.raises(ValueError, match="positive"):
        ctx.alloc(0)
    assert (x == before).all()
    # the collective still works after refusals (nothing was sent)
    coll.allreduce(x)
    assert (x == before * ctx.size).all()


def test_register_caller_memory(ctx, coll):
    buf = np.zeros(2048, dtype=np.float32)
    r = ctx.register(buf)
    buf[:] = ctx.rank
    coll.allreduce(buf)  # zero-copy: buf lies in the region
    assert (buf == sum(range(ctx.size))).all()
    r.close()


def test_s_ma_with_workers_stopped_reaches_the_mean(ctx):
    n = 10_000
    region = ctx.alloc(4 * n)
    model = shadowsync.as_array(region)
    model[:] = rank_data(ctx.rank, n)
    mean = sum(rank_data(r, n).astype(np.float64) for r in range(ctx.size)) / ctx.size
    sync = shadowsync.ShadowSync(ctx, region, algorithm="ma")
    with sync:
        deadline = time.monotonic() + 60
        while sync.stats()["rounds"] < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    st = sync.stats()
    assert st["rounds"] >= 3 and st["errors"] == 0 and not st["running"]
    np.testing.assert_allclose(model, mean, atol=1e-5)
    sync.finish()  # the exact mean, every rank the same
    np.testing.assert_allclose(model, mean, atol=1e-6)
    sync.close()
    del model
    region.close()


def test_sync_releases_the_gil(ctx):
    """A Python thread keeps running while sync() blocks: rank 0 enters the
    round a second late, so the others wait in it."""
    region = ctx.alloc(4 * 1000)
    sh = shadowsync.Shadow(ctx, region)
    ticks = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    t = threading.Thread(target=spin)
    t.start()
    if ctx.rank == 0:
        time.sleep(1.0)
    before = ticks[0]
    t0 = time.monotonic()
    sh.sync()
    waited = time.monotonic() - t0
    during = ticks[0] - before
    stop.set()
    t.join()
    sh.close()
    region.close()
    if ctx.rank != 0 and waited > 0.5:
        assert during > 0, f"no Python thread ran during a {waited:.2f} s sync()"


def test_schedule_and_foreground_rounds(ctx):
    region = ctx.alloc(4 * 64)
    m = shadowsync.as_array(region)
    m[:] = ctx.rank
    sched = shadowsync.schedule("general", 2)
    avg = shadowsync.ModelAverager(ctx, region, period=2, schedule=sched)
    synced = [avg.average_parameters() for _ in range(4)]
    assert synced == [False, True, False, True]
    # groups of two: each round averages pairs, so the values moved from the
    # ranks' own and their sum over the ranks stayed
    total = np.array([float(m[0])])
    coll = shadowsync.Collective(ctx, stage_bytes=64)
    coll.allreduce(total)
    coll.close()
    assert abs(total[0] - sum(range(ctx.size))) < 1e-4
    assert avg.sync.stats()["rounds"] == 2
    avg.close()
    with pytest.raises(ValueError, match="kind"):
        shadowsync.schedule("ring", 2)
    del m
    region.close()


def test_embedding_table_lookup_update(ctx):
    t = shadowsync.EmbeddingTable(ctx, 1000, 4, optimizer="sgd", lr=1.0, init_scale=0.0,
                                  max_batch=256, workers=1)
    w = t.worker(0)
    ids = np.array([ctx.rank, 999], dtype=np.int64)
    out = np.empty(8, dtype=np.float32)
    w.lookup(ids, out)
    assert not out.any()  # init_scale 0
    w.update(ids[:1], -np.ones(4, dtype=np.float32))
    w.flush()
    ctx.barrier()
    got = np.empty(4 * ctx.size, dtype=np.float32)
    w.lookup(np.arange(ctx.size, dtype=np.uint64), got)
    assert (got == 1.0).all()  # every rank's update, applied by its holder
    with pytest.raises(TypeError, match="element type"):
        w.lookup(np.array([1.0]), out)
    with pytest.raises(ValueError, match="needed"):
        w.lookup(ids, np.empty(3, dtype=np.float32))
    with pytest.raises(ValueError, match="max_batch"):
        w.lookup(np.zeros(257, dtype=np.int64), np.empty(257 * 4, dtype=np.float32))
    with pytest.raises(shadowsync.InvalidArgument):
        w.lookup(np.array([1000], dtype=np.int64), out)  # id out of range
    with pytest.raises(IndexError):
        t.worker(1)
    st = t.stats()
    assert st["update_rows"] == 1 and st["shard_rows"] > 0
    del w
    t.close()


def test_errors_carry_the_status():
    assert issubclass(shadowsync.PeerFailed, shadowsync.Error)
    assert issubclass(shadowsync.Timeout, TimeoutError)
    assert issubclass(shadowsync.InvalidArgument, ValueError)
    assert shadowsync.status_string(-20) == shadowsync.status_string(-20)
