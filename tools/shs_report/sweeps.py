"""Tables of the CTR trainer's sweeps: the foreground interval that matches
an S run (ctr-run), the EPS/sync trade-off (ctr-tradeoff) and the failure
figures (fault-figures)."""
import re
import statistics

from . import kill_time, load_ranks, load_runs, mean


def fr_every_like(d, label):
    """Examples per worker between foreground syncs that give the rate of
    syncs of the S run LABEL in DIR, or None without such a run."""
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


def main_tradeoff(argv):
    """tradeoff DIR: the medians over the repetitions of ctr-tradeoff."""
    runs = load_runs(argv[0])
    rows = tradeoff_rows(runs)
    reps = len([k for k in runs if k.startswith("none")])
    print(f"{'config':22s} {'EPS/none':>9s} {'syncs/min':>9s} {'syncs':>6s} {'ms/sync':>8s} "
          f"{'eval NE':>8s} {'avg NE':>8s}   (medians over {reps} reps)")

    def key(k):
        m = re.match(r"(s-ma|fr-ma)\.[ik](\d+)", k)
        return (m.group(1), int(m.group(2))) if m else (k, 0)
    for k in sorted(rows, key=key):
        med = [statistics.median(c) for c in zip(*rows[k])]
        print(f"{k:22s} {med[0]:9.3f} {med[1]:9.1f} {med[5]:6.0f} {med[2]:8.0f} "
              f"{med[3]:8.4f} {med[4]:8.4f}")
    return 0


def main_fault_figures(argv):
    """fault-figures DIR: the two runs of tools/fault-figures side by side."""
    out = argv[0]
    a = {r["rank"]: r for r in load_ranks(out, "s-ma-nofail")}
    b = {r["rank"]: r for r in load_ranks(out, "s-ma-kill2")}
    with open(f"{out}/s-ma-kill2.log", encoding="utf-8", errors="replace") as f:
        killed = kill_time(f.read(), 2)
    print("\nrun            rank  EPS(all)  syncs/min  eval NE   "
          "| after failure: detect s  EPS  syncs/min")
    for label, d in (("no failure", a), ("rank 2 killed", b)):
        for r in sorted(d):
            j = d[r]
            tail = ""
            if j.get("failed_peers", 0) > 0 and killed is not None:
                tail = "| %8.3f %8.0f %8.1f" % (j["fail_seen_s"] - killed, j["eps_after"],
                                               j["syncs_per_min_after"])
            print("%-14s %4d %9.0f %9.1f  %.4f   %s" % (label, r, j["eps"], j["syncs_per_min"],
                                                      j["eval_ne"], tail))
    for label, d in (("no failure", a), ("rank 2 killed", b)):
        ne = [d[r]["eval_ne"] for r in d]
        print("%-14s mean eval NE over its %d final ranks: %.4f" % (label, len(ne), mean(ne)))
    return 0
