"""The CTR trainer's sweeps: the foreground interval that matches an S run
(ctr-run) and the rows of the EPS/sync trade-off (tradeoff.py writes its
table)."""
import re
import statistics

from . import load_ranks, mean


def fr_every_like(d, label):
    """Examples per worker between foreground syncs that give the rate of
    syncs of the S run LABEL in DIR (at least 50: docs/benchmarks.md), or
    None without such a run."""
    runs = load_ranks(d, label)
    if not runs:
        return None
    spm = mean(r["syncs_per_min"] for r in runs)
    eps_worker = mean(r["eps"] for r in runs) / runs[0]["workers"]
    return max(50, int(eps_worker * 60.0 / spm)) if spm > 0 else None


def main_fr_every(argv):
    """fr-every DIR LABEL: print fr_every_like (nothing without a run)."""
    every = fr_every_like(argv[0], argv[1])
    if every is not None:
        print(every)
    return 0


def tradeoff_rows(runs):
    """{config: [(EPS/none, syncs/min, ms/sync, eval NE, avg NE, rounds) per rep]}
    of the labels <config>.r<rep>, each against none.r<rep>."""
    eps = {k: sum(x["eps"] for x in v) for k, v in runs.items()}
    rows = {}
    for label, v in runs.items():
        m = re.match(r"(.*)\.r(\d+)$", label)
        if not m or m.group(1) == "none" or f"none.r{m.group(2)}" not in eps:
            continue
        rows.setdefault(m.group(1), []).append((
            eps[label] / eps[f"none.r{m.group(2)}"],
            statistics.mean(x["syncs_per_min"] for x in v),
            statistics.mean(x["round_ms"] for x in v),
            statistics.mean(x["eval_ne"] for x in v),
            v[0].get("avg_ne", float("nan")),
            sum(x["rounds"] for x in v) / len(v)))
    return rows
