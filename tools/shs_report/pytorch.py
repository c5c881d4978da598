"""Write the block "pytorch" of docs/results/pytorch-dlrm.md from the runs of
tools/pytorch-compare.

    tools/shs-report pytorch OUT --command CMD [--page P | --no-page]

OUT holds repN.json, rank 0's JSON lines of examples/pytorch/dlrm.py, one a
mode (eps summed over the ranks, syncs_per_min, min_interval, eval_ne).
The block: per mode, the median over the repetitions of EPS, EPS against no
sync, syncs per minute and eval NE, and the range of each.
"""
import glob
import json
import os
import statistics

from . import results_page

MODES = (("none", "no dense sync"), ("ma", "S-MA, as fast as it goes"),
         ("ma-limited", "S-MA, rate-limited (min_interval)"))


def label(fig):
    if fig["sync"] == "none":
        return "none"
    return fig["sync"] + ("-limited" if fig.get("min_interval") else "")


def load(out):
    """{label: [figures...]} from OUT/rep*.json (rank 0's JSON lines)."""
    runs = {}
    for f in sorted(glob.glob(os.path.join(out, "rep*.json"))):
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    fig = json.loads(line)
                    runs.setdefault(label(fig), []).append(fig)
    return runs


def cell(values, fmt):
    values = list(values)
    med = statistics.median(values)
    if len(values) == 1:
        return fmt % med
    return (fmt + " (" + fmt + "-" + fmt + ")") % (med, min(values), max(values))


def body(runs, command):
    none = runs.get("none", [])
    base = statistics.median(r["eps"] for r in none) if none else float("nan")
    reps = max(len(v) for v in runs.values())
    lines = [results_page.headline(
        {"where": "guest"}, command,
        "4 ranks x 2 Hogwild threads of examples/pytorch/dlrm.py in one guest, "
        "%d repetition(s) per mode in alternating order, medians (range)" % reps), "",
        "| mode | runs | EPS (all ranks) | EPS / no sync | syncs/min | eval NE |",
        "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for label, what in MODES:
        rs = runs.get(label)
        if not rs:
            continue
        lines.append("| %s (%s) | %d | %s | %s | %s | %s |" % (
            label, what, len(rs), cell((r["eps"] for r in rs), "%.0f"),
            cell((r["eps"] / base for r in rs), "%.3f"),
            cell((r["syncs_per_min"] for r in rs), "%.1f") if label != "none" else "-",
            cell((r["eval_ne"] for r in rs), "%.4f")))
    return "\n".join(lines) + "\n"


def main(argv=None):
    return results_page.block_main(
        argv, "shs-report pytorch", "pytorch-dlrm.md", "pytorch",
        "tools/pytorch-compare", "PyTorch: the DLRM example",
        load, body, lambda runs: "none" in runs)
