"""unit.report: tools/shs_report against what the programs write.

The sample lines below are the ones shs-ctr and shs-ctr-fault print (their
printf formats in examples/ctr/sync.c, report.c and tests/guest/ctr_fault.c);
a changed format that the reporting no longer reads fails here first.
"""
import json
import os
import tempfile
import unittest
import xml.etree.ElementTree as ET

from shs_report import (failure_report, finished, free_port, kill_time, load_ranks,
                        load_runs, spread)
from shs_report import allreduce, ctr, emb, finish, pyoverhead, pytorch, seeds, summary, sweeps

LOG = """\
s-ma       4 rank(s) x 1 workers, 20018 params (0.1 MB), 120000 training examples, 2000 held out (data drawn in 0.1 s)
s-ma       rank 2: SIGKILL to itself at 5123.456 s (CLOCK_MONOTONIC), 9024 examples done
s-ma       rank 0: 1 failed peer(s), first seen at 5125.001 s (CLOCK_MONOTONIC); after it: 812 EPS, 14 rounds, 33.0 syncs/min
s-ma       rank 0/4: 30000 examples in 40.1 s = 748 EPS, train NE 0.9310, eval NE 0.8945, AUC 0.7766, 60 syncs (89.7/min, 120 ms/round), 0 errors (eval 0.5 s)
"""


def rank_json(label, rank, size=2, **kw):
    r = {"label": label, "mode": label.split(".")[0], "rank": rank, "size": size, "workers": 2,
         "params": 1000, "examples": 500, "eps": 100.0, "syncs_per_min": 60.0, "round_ms": 5.0,
         "train_ne": 0.9, "eval_ne": 0.8, "auc": 0.7, "avg_ne": 0.79, "errors": 0, "ds": 0,
         "fr_every": 0, "interval_us": 0, "rounds": 10, "bias": 0.1, "b2": 0.2,
         "curve": [[1000, 0.85, 0.7]]}
    r.update(kw)
    return r


class RunDir(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, r):
        with open(os.path.join(self.d, f"{r['label']}.rank{r['rank']}.json"), "w",
                  encoding="utf-8") as f:
            json.dump(r, f)


class TestLoad(RunDir):
    def test_labels_and_rank_order(self):
        for rank in (1, 0):
            self.write(rank_json("s-ma.i100.r1", rank))
        self.write(rank_json("none.r1", 0, size=1))
        runs = load_runs(self.d)
        self.assertEqual(list(runs), ["none.r1", "s-ma.i100.r1"])
        self.assertEqual([r["rank"] for r in runs["s-ma.i100.r1"]], [0, 1])
        self.assertEqual(len(load_ranks(self.d, "s-ma.i100.r1")), 2)
        self.assertEqual(load_ranks(self.d, "s-ma"), [])

    def test_fr_every_matches_the_s_rate(self):
        for rank in (0, 1):
            self.write(rank_json("s-ma", rank, eps=200.0, syncs_per_min=30.0))
        # 200 EPS / 2 workers = 100 per worker; 30 syncs/min -> every 200
        self.assertEqual(sweeps.fr_every_like(self.d, "s-ma"), 200)
        self.assertIsNone(sweeps.fr_every_like(self.d, "s-bmuf"))

    def test_tradeoff_against_its_own_none(self):
        self.write(rank_json("none.r1", 0, size=1, eps=400.0))
        self.write(rank_json("s-ma.i0.r1", 0, size=1, eps=300.0))
        rows = sweeps.tradeoff_rows(load_runs(self.d))
        self.assertEqual(list(rows), ["s-ma.i0"])
        self.assertAlmostEqual(rows["s-ma.i0"][0][0], 0.75)

    def test_ctr_table_relative_columns(self):
        self.write(rank_json("none", 0, size=1, eps=400.0))
        self.write(rank_json("single", 0, size=1, eps=100.0, eval_ne=0.5))
        rows = [ctr.summarize(k, v) for k, v in load_runs(self.d).items()]
        text = ctr.table(rows, markdown=False)
        line = next(x for x in text.splitlines() if x.startswith("single"))
        self.assertIn("0.250", line)   # EPS / none
        self.assertIn("1.0000", line)  # NE / single
        self.assertTrue(ctr.table(rows, markdown=True).startswith("| mode |"))

    def test_curve_against_seconds(self):
        self.write(rank_json("s-ma", 0, size=1, curve=[[100, 0.9, 0.6, 1.5], [200, 0.8, 0.7, 3.0]]))
        self.write(rank_json("none", 0, size=1))  # an older run: no seconds
        rows = {r["label"]: r for r in
                (ctr.summarize(k, v) for k, v in load_runs(self.d).items())}
        self.assertEqual(rows["s-ma"]["curve_t"], [(1.5, 0.9), (3.0, 0.8)])
        self.assertEqual(rows["none"]["curve_t"], [])
        path = os.path.join(self.d, "t.svg")
        self.assertTrue(ctr.svg(list(rows.values()), path, "t", seconds=True))
        with open(path, encoding="utf-8") as f:
            self.assertIn("seconds since the pass started", f.read())

    def test_sync_only_rows(self):
        self.write(rank_json("s-ma", 0, size=1, eps=0.0))
        rows = [ctr.summarize(k, v) for k, v in load_runs(self.d).items()]
        rows[0]["round_ms"], rows[0]["syncs_per_min"] = 2926.0, 20.5
        line = ctr.sync_only_table(rows).splitlines()[-1]
        self.assertTrue(line.endswith("| 1 | 20.5 | 2.9 s |"), line)
        rows[0]["round_ms"] = 673.0
        self.assertTrue(ctr.sync_only_table(rows).endswith("| 673 ms |"))

    def test_finish_row_spreads(self):
        ranks = [rank_json("s-ma", 0, eval_ne=0.8), rank_json("s-ma", 1, eval_ne=0.9, b2=0.5)]
        self.assertEqual(finish.row(3, "finish", ranks),
                         "| 3 | finish | 0.8000 0.9000 | 0.1000 | 0.300 | 0.7900 |")


class TestSeeds(unittest.TestCase):
    def test_means_spreads_and_claims(self):
        with tempfile.TemporaryDirectory() as top:
            dirs = []
            # three seeds: S-MA's NE is clearly better than no sync's, and
            # FR-MA's within the spread of S-MA's
            for k, (s_ne, fr_ne, none_ne) in enumerate(
                    [(0.80, 0.801, 0.85), (0.81, 0.805, 0.86), (0.79, 0.80, 0.84)]):
                d = os.path.join(top, f"seed{k}")
                os.mkdir(d)
                dirs.append(d)
                for label, ne, eps in (("s-ma", s_ne, 90.0), ("fr-ma", fr_ne, 50.0),
                                       ("none", none_ne, 100.0)):
                    for rank in (0, 1):
                        r = rank_json(label, rank, eps=eps / 2, avg_ne=ne, eval_ne=ne)
                        with open(os.path.join(d, f"{label}.rank{rank}.json"), "w",
                                  encoding="utf-8") as f:
                            json.dump(r, f)
                # an incomplete label does not count
                with open(os.path.join(d, "fr-bmuf.rank0.json"), "w", encoding="utf-8") as f:
                    json.dump(rank_json("fr-bmuf", 0), f)
            stats = seeds.per_seed(dirs)
            self.assertNotIn("fr-bmuf", stats)
            self.assertEqual(stats["s-ma"]["eps_ratio"], [0.9, 0.9, 0.9])
            self.assertAlmostEqual(seeds.sd(stats["s-ma"]["ne"]), 0.01)
            text = seeds.table(stats, ["none", "s-ma", "fr-ma"])
            self.assertIn("| s-ma | 3 | 0.900 ± 0.000 |", text)
            c = seeds.claims(stats).splitlines()
            self.assertIn("s-ma against fr-ma: NE -0.0020 (spread 0.0126): within the spread",
                          c[0])
            self.assertIn("EPS/none +0.400 (spread 0.000): differs", c[0])
            self.assertIn("s-ma against none: NE -0.0500 (spread 0.0200): differs", c[1])

    def test_mean_curves_and_shaded_spread(self):
        with tempfile.TemporaryDirectory() as top:
            dirs = []
            for k, (a, b) in enumerate([(0.8, 0.7), (0.9, 0.8)]):
                d = os.path.join(top, f"seed{k}")
                os.mkdir(d)
                dirs.append(d)
                # seed 1 has one point more: only the points every seed has count
                curve = [[1000, a, 0.7, 1.0 + k], [2000, b, 0.7, 3.0 + k]] + \
                    ([[3000, 0.6, 0.7, 9.0]] if k else [])
                for label in ("none", "s-ma"):
                    for rank in (0, 1):
                        r = rank_json(label, rank, curve=curve, rss_mb=100.0 + rank + k)
                        with open(os.path.join(d, f"{label}.rank{rank}.json"), "w",
                                  encoding="utf-8") as f:
                            json.dump(r, f)
            rows = seeds.mean_curves(dirs, ["s-ma", "none"])
            self.assertEqual([r["label"] for r in rows], ["s-ma", "none"])
            sma = rows[0]
            self.assertEqual([x for x, _ in sma["curve"]], [1000, 2000])
            self.assertAlmostEqual(sma["curve"][0][1], 0.85)
            self.assertEqual([x for x, _ in sma["curve_t"]], [1.5, 3.5])
            x, lo, hi = sma["band"][1]
            self.assertAlmostEqual(lo, 0.75 - 0.0707107, places=6)
            self.assertAlmostEqual(hi, 0.75 + 0.0707107, places=6)
            path = os.path.join(top, "ne.svg")
            self.assertTrue(ctr.svg(rows, path, "t"))
            with open(path, encoding="utf-8") as f:
                pic = f.read()
            self.assertEqual(pic.count('fill-opacity="0.15"'), 2)
            ET.fromstring(pic)  # well-formed
            # the largest rank's RSS per seed, as mean and spread
            text = seeds.table(seeds.per_seed(dirs), ["none", "s-ma"])
            self.assertIn("max RSS/rank MB", text)
            self.assertIn("| 102 ± 1 |", text)


class TestLines(unittest.TestCase):
    def test_kill_and_failure_lines(self):
        self.assertEqual(kill_time(LOG, 2), 5123.456)
        self.assertIsNone(kill_time(LOG, 1))
        f = failure_report(LOG, 0)
        self.assertEqual(f, {"failed": 1, "seen": 5125.001, "eps_after": 812.0,
                             "rounds_after": 14})
        self.assertIsNone(failure_report(LOG, 1))
        self.assertTrue(finished(LOG, 0, 4))
        self.assertFalse(finished(LOG, 1, 4))
        self.assertEqual(spread([3, 1, 2]), 2)

    def test_pytorch_page(self):
        # the JSON line examples/pytorch/dlrm.py prints with --json (rank 0)
        with tempfile.TemporaryDirectory() as d:
            lines = {"rep1": [("none", 0.0, 1000.0, 0.0), ("ma", 0.0, 900.0, 100.0),
                              ("ma", 0.25, 980.0, 50.0)],
                     "rep2": [("ma", 0.0, 950.0, 120.0)]}
            for rep, figs in lines.items():
                with open(os.path.join(d, rep + ".json"), "w", encoding="utf-8") as f:
                    for sync, interval, eps, spm in figs:
                        f.write(json.dumps({"sync": sync, "ranks": 4, "workers": 2,
                                            "min_interval": interval, "eps": eps,
                                            "syncs_per_min": spm, "eval_ne": 0.9,
                                            "seconds": 10.0}) + "\n")
            runs = pytorch.load(d)
            self.assertEqual(sorted(runs), ["ma", "ma-limited", "none"])
            text = pytorch.body(runs, "tools/pytorch-compare")
            self.assertIn("| ma (S-MA, as fast as it goes) | 2 | 925 (900-950) | "
                          "0.925 (0.900-0.950) | 110.0 (100.0-120.0) |", text)
            self.assertIn("| none (no dense sync) | 1 | 1000 | 1.000 | - |", text)

    def test_python_overhead(self):
        # what shs-allreduce-bench, shs-sync-bench, shs-emb-bench --json and
        # tools/py-overhead.py print
        files = {
            "c-allreduce.1.txt": "# size count type redop time(us) algbw(MB/s) busbw(MB/s) "
                                 "#wrong p50(us) p99(us)\n"
                                 "4194304 1048576 float sum 9000.0 466.0 699.0 0 8800.0 9900.0\n",
            "py-allreduce.1.txt": '{"kind": "allreduce", "p50_us": 9240.0}\n',
            "c-lookup.1.txt": '{"ranks": 4, "dim": 16, "batch": 4096, "p50_us": 2000}\n',
            "py-lookup.1.txt": 'noise\n{"kind": "lookup", "p50_us": 2100}\n'}
        with tempfile.TemporaryDirectory() as d:
            for name, text in files.items():
                with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                    f.write(text)
            got = pyoverhead.load(d)
            self.assertEqual(got[("c", "allreduce")], [8800.0])
            text = pyoverhead.body(got, "tools/python-overhead")
            self.assertIn("| 8800 | 9240 | 1.050 | <= 1.05 |", text)
            self.assertIn("| 2000 | 2100 | 1.050 | <= 1.10 |", text)
            self.assertNotIn("sync round", text)

    def test_allreduce_rows(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "ours.n4.txt"), "w", encoding="utf-8") as f:
                f.write("# size count type op time algbw busbw wrong p50 p99\n")
                f.write("1048576 262144 float sum 900.0 1.1 1.7 0 850.0 990.0\n")
            self.assertEqual(allreduce.rows(d, "ours.n4"), {1048576: (850.0, 0.0)})
            self.assertEqual(allreduce.rows(d, "gloo.n4"), {})

    def test_emb_compare(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "readbw.1.16.txt"), "w", encoding="utf-8") as f:
                f.write(" #bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]\n")
                f.write(" 64 20000 1.10 1.02 0.015937\n")
            for k in range(4):  # a round counts only when all four clients finished
                with open(os.path.join(d, "redis.1.16.64.zipf.json"), "a", encoding="utf-8") as f:
                    f.write(json.dumps({"ids_per_s": 1000.0 * (k + 1)}) + "\n")
            with open(os.path.join(d, "redis.2.16.64.zipf.json"), "w", encoding="utf-8") as f:
                f.write(json.dumps({"ids_per_s": 5.0}) + "\n")
            self.assertEqual(emb.load_readbw(d), {16: [15937.0]})
            self.assertEqual(emb.load_redis(d), {("zipf", 16, 64): [10000.0]})
            self.assertIsNone(emb.parse_readbw(" 128 20000 1 1 0.01\n", 64))
            self.assertIsNone(emb.update_table(d))  # no update phase: no table
            with open(os.path.join(d, "ours.update.json"), "w", encoding="utf-8") as f:
                for rps, stall, busy, lag in ((6.0e4, 12.5, 7.0, 16), (7.0e4, 8.25, 8.0, 12)):
                    f.write(json.dumps({"dist": "uniform", "mode": "update", "dim": 64,
                                        "batch": 512, "ids_per_s": 7.7e4,
                                        "update_rows_per_s": rps, "stall_pct": stall,
                                        "apply_busy_pct": busy, "apply_lag_max": lag}) + "\n")
            self.assertEqual(emb.update_table(d).splitlines()[-1],
                             "| update | 64 | 512 | 6.5e+04 | 10.38 | 7.5 | 14 |")

    def test_free_port(self):
        for kind in ("tcp", "udp"):
            self.assertTrue(0 < free_port(kind) < 65536)


class TestSummary(unittest.TestCase):
    def junit(self, statuses):
        root = ET.Element("testsuite")
        for i, st in enumerate(statuses):
            ET.SubElement(root, "testcase", name=f"t{i}", status=st)
        f = tempfile.NamedTemporaryFile("wb", suffix=".xml", delete=False)
        ET.ElementTree(root).write(f)
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name

    def test_not_run_and_empty_fail(self):
        line, bad = summary.group_line("rdma", summary.count(self.junit(["run", "run"])))
        self.assertEqual((line.strip(), bad), ("rdma     : 2/2 passed", False))
        line, bad = summary.group_line("rdma", summary.count(self.junit(["run", "notrun"])))
        self.assertTrue(bad)
        self.assertIn("1 NOT RUN: t1", line)
        line, bad = summary.group_line("rdma", summary.count(self.junit(["fail"])))
        self.assertTrue(bad)
        self.assertIn("1 FAILED: t0", line)
        self.assertTrue(summary.group_line("vm", summary.count(self.junit([])))[1])


if __name__ == "__main__":
    unittest.main()
