#!/usr/bin/env python3
"""A DLRM-style CTR model in plain PyTorch, trained the ShadowSync way.

    python3 -m torch.distributed.run --redirects 1 --tee 1 --nproc_per_node 4 examples/pytorch/dlrm.py
    build/tools/shs-launch -n 4 -- python3 examples/pytorch/dlrm.py

(with PYTHONPATH=build/python, or after cmake --install; the two torchrun
flags work around Debian's torch 1.13 on Python 3.11). Each rank trains
on its share of a synthetic click log shaped like Criteo's (13 dense
features, 26 categorical ones with long-tailed ids, labels from a hidden
teacher) with --workers Hogwild threads on one copy of the model. The 26
embedding tables are one shadowsync.torch.ShardedEmbeddingBag (a row range
per field) sharded over the ranks: rows looked up over RDMA, the next
batch's rows prefetched while the current one computes, row gradients sent
to their holders. The dense part (bottom MLP, pairwise dot interaction,
top MLP) is registered and synced in the background by the shadow engine
(--sync ma, bmuf, easgd or none): the workers never wait for it. At the end
the ranks' dense parts are averaged (finish) and every rank scores the same
held-out examples. Prints examples per second and normalized entropy
(log loss over the entropy of the base rate; lower is better), rank 0 also
one JSON line (--json). --sync takes a comma-separated list: each mode
trains a fresh model in turn in the same processes (what
tools/pytorch-compare uses, so that torch is imported once).
"""
import argparse
import json
import math
import threading
import time

import numpy as np
import torch

import shadowsync
import shadowsync.torch as shs

FIELDS, DENSE = 26, 13


class Teacher:
    """The hidden model that labels the log: deterministic in the seed."""

    def __init__(self, seed, rows_per_field, ctr):
        g = np.random.default_rng(seed)
        self.rows = rows_per_field
        self.w_dense = g.standard_normal(DENSE) * 0.4
        self.w_cat = g.standard_normal((FIELDS, rows_per_field)) * 0.6
        self.bias = math.log(ctr / (1 - ctr))

    def draw(self, seed, n):
        g = np.random.default_rng(seed)
        dense = g.standard_normal((n, DENSE)).astype(np.float32)
        # long-tailed ids: a zipf draw folded into the field's rows
        cat = (g.zipf(1.2, (n, FIELDS)) - 1) % self.rows
        logit = self.bias + dense @ self.w_dense + self.w_cat[np.arange(FIELDS), cat].sum(1) * 0.3
        label = (g.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
        ids = cat + np.arange(FIELDS) * self.rows  # one table, a row range per field
        return torch.from_numpy(dense), torch.from_numpy(ids.astype(np.int64)), \
            torch.from_numpy(label)


def mlp(sizes):
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


class Dense(torch.nn.Module):
    """The dense part: bottom MLP, dot interaction of the 27 vectors, top MLP."""

    def __init__(self, dim):
        super().__init__()
        self.bottom = mlp([DENSE, 64, dim])
        n = FIELDS + 1
        self.top = mlp([dim + n * (n - 1) // 2, 64, 1])
        self.iu = torch.triu_indices(n, n, 1)
        self.prior = 0.0

    def start_at(self, ctr):
        """The output bias at the prior's logit: the first predictions are
        the base rate, not 0.5 (as the C trainer starts)."""
        with torch.no_grad():
            self.top[-1].bias.fill_(math.log(ctr / (1 - ctr)))

    def forward(self, dense, emb):
        x = self.bottom(dense)
        v = torch.cat([x.unsqueeze(1), emb], 1)           # batch x 27 x dim
        inter = torch.bmm(v, v.transpose(1, 2))[:, self.iu[0], self.iu[1]]
        return self.top(torch.cat([x, inter], 1)).squeeze(1)


def one_per_bag(n):
    """offsets of n examples' 26 ids, a bag of one id per field"""
    return torch.arange(0, n * FIELDS, dtype=torch.int64)


def worker(args, wid, model, params, bag, data, stats):
    dense, ids, label = data
    lr = args.lr
    n = label.numel()
    idx = list(range(wid * args.batch, n, args.workers * args.batch))
    loss_sum = 0.0
    done = 0
    for k, i in enumerate(idx):
        j = min(i + args.batch, n)
        emb = bag(ids[i:j].reshape(-1), one_per_bag(j - i)).view(j - i, FIELDS, -1)
        if k + 1 < len(idx):  # the next batch's rows travel while this one computes
            i2 = idx[k + 1]
            j2 = min(i2 + args.batch, n)
            bag.prefetch(ids[i2:j2].reshape(-1), one_per_bag(j2 - i2))
        logit = model(dense[i:j], emb)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, label[i:j],
                                                                    reduction="sum")
        grads = torch.autograd.grad(loss / (j - i), params + [bag.trigger], allow_unused=True)
        # Hogwild: no lock around the shared dense part. Through .data, so
        # that the step does not bump the parameters' version counters: the
        # other worker's graph saved them and would refuse its backward.
        for p, g in zip(params, grads):
            p.data.add_(g, alpha=-lr)
        loss_sum += float(loss)
        done += j - i
    stats[wid] = (loss_sum, done)


def entropy(p):
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


SYNCS = ("ma", "bmuf", "easgd", "none")


def sync_list(text):
    """'ma,none,ma@0.25' -> [('ma', None), ('none', None), ('ma', 0.25)]:
    @S sets that mode's least time between two rounds (--min-interval)."""
    modes = []
    for m in text.split(","):
        name, _, interval = m.partition("@")
        if name not in SYNCS:
            raise argparse.ArgumentTypeError(f"--sync: {name!r} is not one of {', '.join(SYNCS)}")
        try:
            modes.append((name, float(interval) if interval else None))
        except ValueError:
            raise argparse.ArgumentTypeError(f"--sync: {m!r}: @ takes seconds") from None
    return modes


def train_one(a, ctx, mode, interval, train, held):
    """One run of one sync mode from a fresh model; returns the figures."""
    rank, size = ctx.rank, ctx.size
    torch.manual_seed(a.seed)  # the same initial dense part on every rank
    model = Dense(a.dim)
    model.start_at(a.ctr)
    reg = shs.register_module(ctx, model)
    params = list(model.parameters())
    bag = shs.ShardedEmbeddingBag(ctx, FIELDS * a.rows, a.dim, optimizer="adagrad",
                                  lr=a.emb_lr, init_scale=0.05, seed=a.seed,
                                  max_batch=a.batch * FIELDS, workers=a.workers + 1)
    sync = None
    if mode != "none":
        sync = shadowsync.ShadowSync(ctx, reg, algorithm=mode, min_interval=interval)
    ctx.barrier()
    stats = [None] * a.workers

    def run(w):
        try:
            worker(a, w, model, params, bag, train, stats)
        except BaseException as e:  # noqa: B902 - re-raised by the main thread
            stats[w] = e

    threads = [threading.Thread(target=run, args=(w,)) for w in range(a.workers)]
    t0 = time.monotonic()
    if sync:
        sync.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.monotonic() - t0
    for s in stats:
        if isinstance(s, BaseException):
            raise s
    rounds, per_min = 0, 0.0
    if sync:
        sync.stop()
        st = sync.stats()
        rounds, per_min = st["rounds"], st["syncs_per_min"]
        sync.finish()  # one model: the exact mean of the dense parts
    bag.flush()
    ctx.barrier()
    loss = sum(s[0] for s in stats)
    done = sum(s[1] for s in stats)
    base = float(train[2].mean()) or a.ctr
    with torch.no_grad():
        dense, ids, label = held
        logits = []
        for i in range(0, label.numel(), a.batch):
            j = min(i + a.batch, label.numel())
            emb = bag(ids[i:j].reshape(-1), one_per_bag(j - i))
            logits.append(model(dense[i:j], emb.view(j - i, FIELDS, -1)))
        ll = torch.nn.functional.binary_cross_entropy_with_logits(torch.cat(logits), label)
    eval_ne = float(ll) / entropy(float(label.mean()))
    eps = done / secs
    print(f"{mode:6s} rank {rank}/{size}: {done} examples in {secs:.1f} s = {eps:.0f} EPS, "
          f"train NE {loss / done / entropy(base):.4f}, eval NE {eval_ne:.4f} "
          f"({'averaged' if sync else 'own'} model), {rounds} syncs ({per_min:.0f}/min)",
          flush=True)
    fig = np.array([eps, per_min], dtype=np.float64)
    coll = shadowsync.Collective(ctx, stage_bytes=64)
    coll.allreduce(fig)
    coll.close()
    if sync:
        sync.close()
    bag.close()
    params.clear()
    model = None
    reg.close()
    return {"sync": mode, "ranks": size, "workers": a.workers, "examples": a.examples,
            "min_interval": interval if sync else 0.0, "eps": fig[0],
            "syncs_per_min": fig[1] / size, "eval_ne": eval_ne, "seconds": secs}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=80_000, help="over all ranks")
    ap.add_argument("--eval", type=int, default=10_000, help="held-out examples")
    ap.add_argument("--rows", type=int, default=2000, help="rows per field")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--emb-lr", type=float, default=0.05)
    ap.add_argument("--ctr", type=float, default=0.04)
    ap.add_argument("--sync", type=sync_list, default=[("ma", None)],
                    help="ma, bmuf, easgd or none (MODE@S: at most a round per S "
                         "seconds); a comma-separated list runs each in turn")
    ap.add_argument("--min-interval", type=float, default=0.0,
                    help="least seconds between two rounds (a mode's @S overrides it)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="rank 0: one JSON line of figures a mode")
    return ap.parse_args(argv)


def main():
    a = parse_args()
    torch.set_num_threads(1)  # the workers are the parallelism
    ctx = shadowsync.Context()
    teacher = Teacher(a.seed, a.rows, a.ctr)
    train = teacher.draw(a.seed * 1000 + 1 + ctx.rank, a.examples // ctx.size)
    held = teacher.draw(a.seed * 1000, a.eval)
    for mode, interval in a.sync:
        fig = train_one(a, ctx, mode, a.min_interval if interval is None else interval,
                        train, held)
        if ctx.rank == 0 and a.json:
            print(json.dumps(fig), flush=True)
    ctx.close()


if __name__ == "__main__":
    main()
