"""ctr_tradeoff_report: the table of tools/ctr-tradeoff.

    ctr_tradeoff_report.py OUT [--page FILE | --no-page]

OUT holds <label>.rank<r>.json from shs-ctr (labels none.r<k>,
s-ma.i<us>.r<k>, s-ma-bf16.i<us>.r<k>, fr-ma.k<examples>.r<k>) and ctr-tradeoff.run (date, where,
command). Each configuration's EPS is divided by the no-sync EPS of the same
repetition; the table gives medians over the repetitions. Prints it and
writes the block ctr-tradeoff of docs/results/ctr-tradeoff.md.
Python 3 standard library only.
"""
import argparse
import os
import re
import statistics
import sys

from . import load_runs, results_page
from .sweeps import tradeoff_rows


ORDER = {"s-ma": 0, "s-ma-bf16": 1, "fr-ma": 2}


def key(k):
    m = re.match(r"(s-ma|s-ma-bf16|fr-ma)\.[ik](\d+)", k)
    return (int(m.group(2)), ORDER[m.group(1)]) if m and m.group(1) != "fr-ma" else \
        ((10 ** 12, ORDER[m.group(1)], int(m.group(2))) if m else (10 ** 13, 0))


def pretty(k):
    m = re.match(r"(s-ma|s-ma-bf16|fr-ma)\.([ik])(\d+)", k)
    if not m:
        return k
    v = int(m.group(3))
    if m.group(2) == "i":
        name = "S-MA bf16" if m.group(1) == "s-ma-bf16" else "S-MA"
        return f"{name} back to back" if v == 0 else f"{name}, rounds >= {v / 1e6:g} s apart"
    return "FR-MA every %d examples/worker" % v


def table(runs):
    rows = tradeoff_rows(runs)
    reps = len({k for k in runs if k.startswith("none")})
    text = [f"{'config':22s} {'EPS/none':>9s} {'syncs/min':>9s} {'syncs':>6s} {'ms/sync':>8s} "
            f"{'eval NE':>8s} {'avg NE':>8s}   (medians over {reps} reps)"]
    page = ["| config | EPS/none | syncs/min | syncs | ms/sync | eval NE | avg-model eval NE |",
            "|---|---|---|---|---|---|---|"]
    for k in sorted(rows, key=key):
        med = [statistics.median(c) for c in zip(*rows[k])]
        text.append(f"{k:22s} {med[0]:9.3f} {med[1]:9.1f} {med[5]:6.0f} {med[2]:8.0f} "
                    f"{med[3]:8.4f} {med[4]:8.4f}")
        page.append(f"| {pretty(k)} | {med[0]:.3f} | {med[1]:.1f} | {med[5]:.0f} | "
                    f"{med[2]:.0f} | {med[3]:.4f} | {med[4]:.4f} |")
    return "\n".join(text), "\n".join(page), reps


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--page", default=results_page.page_path("ctr-tradeoff.md"))
    ap.add_argument("--no-page", action="store_true")
    a = ap.parse_args(argv)
    runs = load_runs(a.out)
    if not runs:
        print(f"ctr-tradeoff: no results in {a.out}", file=sys.stderr)
        return 1
    text, page, reps = table(runs)
    print(text)
    if not a.no_page:
        run = results_page.read_run(os.path.join(a.out, "ctr-tradeoff.run"))
        head = results_page.headline(
            run, "tools/ctr-tradeoff", f"medians of {reps} repetition(s); EPS/none: EPS over "
            "the no-sync EPS of the same repetition")
        results_page.try_write_block(a.page, "ctr-tradeoff", head + "\n\n" + page,
                                     "tools/ctr-tradeoff",
                                     title="CTR trainer: throughput against sync frequency")
    return 0

