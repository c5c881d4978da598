"""The modes of shs-ctr over several seeds: means, spreads, and which
differences exceed them.

    tools/shs-report ctr-seeds DIR [DIR ...] [--order L,L] [--page P --block B --command C]

Each DIR is one seed's run of tools/ctr-run (DIR/<label>.rank<r>.json, a
"none" label for the EPS ratio and, when present, a "single" label for the
quality reference). Per label and seed: EPS over the same seed's no-sync
EPS, and the model's eval NE (sync modes: the averaged final model's; the
others: the mean over the ranks' own models). Per label over the seeds:
mean and sample standard deviation. Then the comparisons the ShadowSync
paper makes (each S mode against its FR counterpart and against no sync;
every mode against the one-process reference): a difference is called one
only when it exceeds the sum of the two standard deviations, else "within
the spread".
"""
import argparse
import math
import sys

from . import load_runs, mean, results_page

PAIRS = [("s-ma", "fr-ma"), ("s-bmuf", "fr-bmuf"), ("s-easgd", "fr-easgd"),
         ("s-ma", "none"), ("s-bmuf", "none"), ("s-easgd", "none")]


def sd(xs):
    xs = list(xs)
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def model_ne(ranks):
    """The figure a job would export: the averaged model's NE in sync modes."""
    if ranks[0]["mode"] in ("none", "single"):
        return mean(r["eval_ne"] for r in ranks)
    return ranks[0]["avg_ne"]


def per_seed(dirs):
    """{label: {"eps_ratio": [...], "ne": [...], "syncs": [...]}} over the dirs."""
    out = {}
    for d in dirs:
        runs = load_runs(d)
        base = runs.get("none")
        base_eps = sum(r["eps"] for r in base) if base else None
        for label, ranks in runs.items():
            if len(ranks) != ranks[0]["size"]:
                continue  # an incomplete run does not count
            s = out.setdefault(label, {"eps_ratio": [], "ne": [], "syncs": [],
                                       "mode": ranks[0]["mode"]})
            eps = sum(r["eps"] for r in ranks)
            if base_eps and ranks[0]["size"] == base[0]["size"]:
                s["eps_ratio"].append(eps / base_eps)
            s["ne"].append(model_ne(ranks))
            s["syncs"].append(mean(r["syncs_per_min"] for r in ranks))
    return out


def fmt(xs, digits):
    if not xs:
        return "-"
    return f"{mean(xs):.{digits}f} ± {sd(xs):.{digits}f}"


def table(stats, order):
    labels = sorted(stats, key=lambda k: order.index(k) if k in order else len(order))
    ref = stats.get("single")
    lines = ["| mode | seeds | EPS/none | syncs/min | model eval NE | NE/single |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for k in labels:
        s = stats[k]
        rel = (fmt([n / r for n, r in zip(s["ne"], ref["ne"])], 4)
               if ref and len(ref["ne"]) == len(s["ne"]) else "-")
        sync = s["mode"] not in ("none", "single")
        lines.append(f"| {k} | {len(s['ne'])} | {fmt(s['eps_ratio'], 3)} | "
                     f"{fmt(s['syncs'], 1) if sync else '-'} | {fmt(s['ne'], 4)} | {rel} |")
    return "\n".join(lines)


def verdict(a, b, what, digits):
    """One comparison of two lists of per-seed figures."""
    d = mean(a) - mean(b)
    spread = sd(a) + sd(b)
    word = "differs" if abs(d) > spread else "within the spread"
    return f"{what} {d:+.{digits}f} (spread {spread:.{digits}f}): {word}"


def claims(stats):
    lines = []
    for x, y in PAIRS + [(k, "single") for k in sorted(stats) if k != "single"]:
        if x not in stats or y not in stats:
            continue
        parts = [verdict(stats[x]["ne"], stats[y]["ne"], "NE", 4)]
        if stats[x]["eps_ratio"] and stats[y]["eps_ratio"] and y != "single":
            parts.append(verdict(stats[x]["eps_ratio"], stats[y]["eps_ratio"], "EPS/none", 3))
        lines.append(f"- {x} against {y}: " + "; ".join(parts))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="shs-report ctr-seeds", description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="+", help="one tools/ctr-run output per seed")
    ap.add_argument("--order", default="single,none,s-ma,fr-ma,s-bmuf,fr-bmuf,s-easgd,fr-easgd")
    ap.add_argument("--page")
    ap.add_argument("--block")
    ap.add_argument("--command", default="tools/ctr-seeds")
    a = ap.parse_args(argv)
    stats = per_seed(a.dir)
    if not stats:
        print("shs-report ctr-seeds: no complete runs", file=sys.stderr)
        return 1
    text = table(stats, a.order.split(",")) + "\n\n" + claims(stats)
    print(text)
    if a.page or a.block:
        if not (a.page and a.block):
            print("shs-report ctr-seeds: --page and --block go together", file=sys.stderr)
            return 2
        n = max(len(s["ne"]) for s in stats.values())
        head = results_page.headline({"where": "guest", "command": a.command}, a.command,
                                     f"{n} seeds, mean ± sample standard deviation")
        results_page.try_write_block(a.page, a.block, head + "\n\n" + text,
                                     "tools/shs-report ctr-seeds", title="CTR trainer: seeds")
    return 0
