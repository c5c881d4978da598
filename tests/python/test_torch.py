"""shadowsync.torch: registered modules, tensor allreduce, the sharded
EmbeddingBag against torch's dense one.

Run by every rank of a job (shs-launch -n 4 -- python3 -m pytest ...): the
tests are collective and run in file order on every rank.
"""
import importlib.util
import math
import os

import numpy as np
import pytest
import torch

import shadowsync
import shadowsync.torch as shs


EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "pytorch", "dlrm.py")


def net(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))


def test_registered_parameters_are_views(ctx):
    m = net(ctx.rank)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    reg = shs.register_module(ctx, m)
    # same values, now in the region
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k])
    flat = shs.as_tensor(reg.region)
    snapshot = flat.clone()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    loss = m(torch.randn(32, 8)).pow(2).mean()
    loss.backward()
    opt.step()
    assert not torch.equal(flat, snapshot), "a training step did not change the region"
    assert torch.equal(flat, reg.flat)
    reg.check()
    # something that reallocates a parameter is named
    m[0].weight.data = m[0].weight.data.clone()
    with pytest.raises(RuntimeError, match="0.weight"):
        reg.check()
    with pytest.raises(RuntimeError, match="0.weight"):
        shadowsync.ShadowSync(ctx, reg).start()
    del flat
    reg.close()


def test_register_refuses_other_dtypes(ctx):
    with pytest.raises(TypeError, match="float32"):
        shs.register_module(ctx, torch.nn.Linear(2, 2).double())
    with pytest.raises(TypeError, match="Module"):
        shs.register_module(ctx, torch.zeros(3))


def test_module_s_ma_then_finish_is_the_mean(ctx):
    models = [net(r) for r in range(ctx.size)]
    m = models[ctx.rank]
    mean = {k: sum(mm.state_dict()[k] for mm in models) / ctx.size for k in m.state_dict()}
    sync = shadowsync.ShadowSync(ctx, m, algorithm="ma")
    with sync:
        pass
    sync.finish()
    for k, v in m.state_dict().items():
        torch.testing.assert_close(v, mean[k], atol=1e-6, rtol=1e-6)
    sync.close()
    sync.registered.close()


def test_tensor_allreduce_equals_torch_sum(ctx, coll):
    g = torch.Generator().manual_seed(11)
    xs = [torch.randn(1000, generator=g) for _ in range(ctx.size)]
    x = xs[ctx.rank].clone()
    shs.allreduce(coll, x)
    torch.testing.assert_close(x, torch.stack(xs).sum(0), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="contiguous"):
        shs.allreduce(coll, torch.zeros(4, 4).t())
    with pytest.raises(TypeError, match="dtype"):
        shs.allreduce(coll, torch.zeros(4, dtype=torch.int32))


def batches(rank, steps, rows, bags, per):
    g = torch.Generator().manual_seed(100 + rank)
    for _ in range(steps):
        ids = torch.randint(0, rows, (bags * per,), generator=g)
        offsets = torch.arange(0, bags * per, per)
        target = torch.randn(bags, 4, generator=g)
        yield ids, offsets, target


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_sharded_bag_trains_like_a_dense_bag(ctx, mode):
    """Every rank trains its own batches; each step's lookups are done
    everywhere before any update is sent (barrier) and every update is
    applied before the next step (flush, barrier), so the table must follow
    SGD on the dense bag with the summed gradient of every rank's batch."""
    rows, dim, lr, steps = 200, 4, 0.05, 5
    bag = shs.ShardedEmbeddingBag(ctx, rows, dim, mode=mode, optimizer="sgd", lr=lr,
                                  init_scale=0.1, seed=3, max_batch=512)
    dense = torch.nn.EmbeddingBag(rows, dim, mode=mode)
    with torch.no_grad():
        dense.weight.copy_(bag.rows(torch.arange(rows)))
    opt = torch.optim.SGD(dense.parameters(), lr=lr)
    streams = [batches(r, steps, rows, 16, 3) for r in range(ctx.size)]
    for _ in range(steps):
        work = [next(s) for s in streams]
        ids, offsets, target = work[ctx.rank]
        if ctx.rank % 2 == 0:
            bag.prefetch(ids, offsets)  # the asynchronous path on half the ranks
        out = bag(ids, offsets)
        ctx.barrier()  # a fast rank's update must not reach a slow rank's lookup
        ((out - target) ** 2).sum().backward()
        bag.flush()
        ctx.barrier()
        opt.zero_grad()
        sum(((dense(i, o) - t) ** 2).sum() for i, o, t in work).backward()
        opt.step()
    torch.testing.assert_close(bag.rows(torch.arange(rows)), dense.weight.detach(),
                               atol=1e-5, rtol=1e-4)
    ctx.barrier()
    bag.close()


def test_sharded_bag_bad_input(ctx):
    bag = shs.ShardedEmbeddingBag(ctx, 10, 2, max_batch=64)
    with pytest.raises(TypeError, match="dtype"):
        bag(torch.zeros(4), torch.tensor([0]))
    with pytest.raises(ValueError, match="offsets"):
        bag(torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ValueError, match="0..9"):
        bag(torch.tensor([[3, 10]]))
    ctx.barrier()
    bag.close()


def test_dlrm_example_ends_on_one_model(ctx):
    """examples/pytorch/dlrm.py, small: 2 Hogwild threads a rank, sharded
    bags, S-MA on the dense part; after the finish every rank scores the
    same model (the same eval NE everywhere), and the NE is finite."""
    spec = importlib.util.spec_from_file_location("dlrm_example", EXAMPLE)
    dlrm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dlrm)
    a = dlrm.parse_args(["--examples", "2048", "--eval", "512", "--rows", "100",
                         "--batch", "64"])
    teacher = dlrm.Teacher(a.seed, a.rows, a.ctr)
    train = teacher.draw(a.seed * 1000 + 1 + ctx.rank, a.examples // ctx.size)
    held = teacher.draw(a.seed * 1000, a.eval)
    fig = dlrm.train_one(a, ctx, "ma", 0.0, train, held)
    assert fig["eps"] > 0 and math.isfinite(fig["eval_ne"])
    every = np.zeros(ctx.size)
    every[ctx.rank] = fig["eval_ne"]
    coll = shadowsync.Collective(ctx, stage_bytes=1024)
    coll.allreduce(every)
    coll.close()
    assert np.allclose(every, every[0], rtol=1e-5), f"eval NE differs over the ranks: {every}"
