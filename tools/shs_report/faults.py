"""fault_figures_report: the table of tools/fault-figures.

    fault_figures_report.py OUT [--page FILE | --no-page]

OUT holds s-ma-nofail.rank<r>.json and s-ma-kill2.rank<r>.json from
shs-ctr, s-ma-kill2.log (the launcher's output, with rank 2's "SIGKILL to
itself at T s" line) and fault-figures.run (date, where, command). Prints,
per run and rank, EPS, syncs per minute and eval NE, and for the survivors
of the kill the detection time (kill to first sight) and their EPS and
syncs per minute after it; then writes the block fault-figures of
docs/results/faults.md. Python 3 standard library only.
"""
import argparse
import os
import sys

from . import kill_time, load_ranks, results_page

RUNS = (("no failure", "s-ma-nofail"), ("rank 2 killed", "s-ma-kill2"))


def load(out, label):
    return {j["rank"]: j for j in load_ranks(out, label)}


def killed_at(out):
    try:
        with open(os.path.join(out, "s-ma-kill2.log"), encoding="utf-8") as f:
            return kill_time(f.read(), 2)
    except FileNotFoundError:
        return None


def report(out):
    runs = {label: load(out, stem) for label, stem in RUNS}
    killed = killed_at(out)
    text = ["\nrun            rank  EPS(all)  syncs/min  eval NE   | after failure: "
            "detect s  EPS  syncs/min"]
    page = ["| run | rank | EPS | syncs/min | eval NE | detection (s) | EPS after | "
            "syncs/min after |", "|---|---|---|---|---|---|---|---|"]
    for label, d in runs.items():
        for r in sorted(d):
            j = d[r]
            tail, cells = "", "- | - | -"
            if j.get("failed_peers", 0) > 0 and killed is not None:
                det = j["fail_seen_s"] - killed
                tail = "| %8.3f %8.0f %8.1f" % (det, j["eps_after"], j["syncs_per_min_after"])
                cells = "%.3f | %.0f | %.1f" % (det, j["eps_after"], j["syncs_per_min_after"])
            text.append("%-14s %4d %9.0f %9.1f  %.4f   %s" % (
                label, r, j["eps"], j["syncs_per_min"], j["eval_ne"], tail))
            page.append("| %s | %d | %.0f | %.1f | %.4f | %s |" % (
                label, r, j["eps"], j["syncs_per_min"], j["eval_ne"], cells))
    page.append("")
    for label, d in runs.items():
        ne = [d[r]["eval_ne"] for r in d]
        if ne:
            line = "%s: mean eval NE over its %d final ranks: %.4f" % (
                label, len(ne), sum(ne) / len(ne))
            text.append("%-14s mean eval NE over its %d final ranks: %.4f" % (
                label, len(ne), sum(ne) / len(ne)))
            page.append("- " + line)
    return "\n".join(text), "\n".join(page), all(runs.values())


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--page", default=results_page.page_path("faults.md"))
    ap.add_argument("--no-page", action="store_true")
    a = ap.parse_args(argv)
    text, page, complete = report(a.out)
    print(text)
    if not complete:
        print(f"fault-figures: a run left no results in {a.out}", file=sys.stderr)
        return 1
    if not a.no_page:
        run = results_page.read_run(os.path.join(a.out, "fault-figures.run"))
        head = results_page.headline(
            run, "tools/fault-figures", "4 ranks x 2 workers of shs-ctr, S-MA, the same pass "
            "without failure and with rank 2 killed (SIGKILL) half way")
        results_page.try_write_block(a.page, "fault-figures", head + "\n\n" + page,
                                     "tools/fault-figures", title="Failures")
    return 0

