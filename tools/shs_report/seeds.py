"""The modes of shs-ctr over several seeds: means, spreads, and which
differences exceed them.

    tools/shs-report ctr-seeds DIR [DIR ...] [--order L,L] [--svg F] [--svg-seconds F]
                               [--page P --block B --command C]

Each DIR is one seed's run of tools/ctr-run (DIR/<label>.rank<r>.json, a
"none" label for the EPS ratio and, when present, a "single" label for the
quality reference). Per label and seed: EPS over the same seed's no-sync
EPS, and the model's eval NE (sync modes: the averaged final model's; the
others: the mean over the ranks' own models). Per label over the seeds:
mean and sample standard deviation. Then the comparisons the ShadowSync
paper makes (each S mode against its FR counterpart and against no sync;
every mode against the one-process reference): a difference is called one
only when it exceeds the sum of the two standard deviations, else "within
the spread"; the hybrid modes against their everything-replicated runs
(labels <mode>-replicated) when those ran. With --svg (--svg-seconds): the
mean eval NE curve per label over the seeds against examples (seconds),
one standard deviation either side shaded; with --page the block links them.
"""
import argparse
import math
import os
import sys

from . import ctr, load_runs, mean, results_page

PAIRS = [("s-ma", "fr-ma"), ("s-bmuf", "fr-bmuf"), ("s-easgd", "fr-easgd"),
         ("s-ma", "none"), ("s-bmuf", "none"), ("s-easgd", "none"),
         ("none", "none-replicated"), ("s-ma", "s-ma-replicated")]


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
            s = out.setdefault(label, {"eps_ratio": [], "ne": [], "syncs": [], "rss": [],
                                       "mode": ranks[0]["mode"]})
            if all("rss_mb" in r for r in ranks):
                s["rss"].append(max(r["rss_mb"] for r in ranks))
            eps = sum(r["eps"] for r in ranks)
            if base_eps and ranks[0]["size"] == base[0]["size"]:
                s["eps_ratio"].append(eps / base_eps)
            s["ne"].append(model_ne(ranks))
            s["syncs"].append(mean(r["syncs_per_min"] for r in ranks))
    return out


def mean_curves(dirs, order):
    """Per label, rank 0's eval NE curve averaged point by point over the
    seeds (a point counts when every seed has it), as rows for ctr.svg: the
    mean curve against examples and against seconds, and the bands of one
    standard deviation either side."""
    seen = {}
    for d in dirs:
        for label, ranks in load_runs(d).items():
            if len(ranks) == ranks[0]["size"]:
                seen.setdefault(label, []).append(ctr.summarize(label, ranks))
    rows = []
    for label, runs in seen.items():
        n = min(len(r["curve"]) for r in runs)
        nt = min(len(r["curve_t"]) for r in runs)
        row = {"label": label, "curve": [], "band": [], "curve_t": [], "band_t": []}
        for key, band, m in (("curve", "band", n), ("curve_t", "band_t", nt)):
            for k in range(m):
                x = mean(r[key][k][0] for r in runs)
                ys = [r[key][k][1] for r in runs]
                row[key].append((x, mean(ys)))
                row[band].append((x, mean(ys) - sd(ys), mean(ys) + sd(ys)))
        rows.append(row)
    rows.sort(key=lambda r: order.index(r["label"]) if r["label"] in order else len(order))
    return rows


def fmt(xs, digits):
    if not xs:
        return "-"
    return f"{mean(xs):.{digits}f} ± {sd(xs):.{digits}f}"


def table(stats, order):
    labels = sorted(stats, key=lambda k: order.index(k) if k in order else len(order))
    ref = stats.get("single")
    rss = any(stats[k].get("rss") for k in labels)
    lines = ["| mode | seeds | EPS/none | syncs/min | model eval NE | NE/single |" +
             (" max RSS/rank MB |" if rss else ""),
             "| --- | ---: | ---: | ---: | ---: | ---: |" + (" ---: |" if rss else "")]
    for k in labels:
        s = stats[k]
        rel = (fmt([n / r for n, r in zip(s["ne"], ref["ne"])], 4)
               if ref and len(ref["ne"]) == len(s["ne"]) else "-")
        sync = s["mode"] not in ("none", "single")
        lines.append(f"| {k} | {len(s['ne'])} | {fmt(s['eps_ratio'], 3)} | "
                     f"{fmt(s['syncs'], 1) if sync else '-'} | {fmt(s['ne'], 4)} | {rel} |" +
                     (f" {fmt(s.get('rss', []), 0)} |" if rss else ""))
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
    ap.add_argument("--order", default="single,none,s-ma,fr-ma,s-bmuf,fr-bmuf,s-easgd,fr-easgd,"
                                       "none-replicated,s-ma-replicated")
    ap.add_argument("--svg", help="mean eval NE against examples, the spread shaded")
    ap.add_argument("--svg-seconds", help="the same against wall-clock seconds")
    ap.add_argument("--title", default="Hybrid CTR trainer: eval NE against examples seen, "
                                       "mean over seeds (± 1 sd shaded)")
    ap.add_argument("--page")
    ap.add_argument("--block")
    ap.add_argument("--command", default="tools/ctr-seeds")
    a = ap.parse_args(argv)
    stats = per_seed(a.dir)
    if not stats:
        print("shs-report ctr-seeds: no complete runs", file=sys.stderr)
        return 1
    order = a.order.split(",")
    text = table(stats, order) + "\n\n" + claims(stats)
    print(text)
    pictures = []
    for path, seconds, what in ((a.svg, False, "examples seen"),
                                (a.svg_seconds, True, "seconds")):
        if path and ctr.svg(mean_curves(a.dir, order), path,
                            a.title.replace("examples seen", what), seconds=seconds):
            print(f"picture: {path}")
            pictures.append((what, path))
    if a.page:
        here = os.path.dirname(os.path.abspath(a.page))
        text += "".join(f"\n\n![eval NE against {what}, mean over seeds, one standard "
                        f"deviation shaded]({os.path.relpath(os.path.abspath(p), here)})"
                        for what, p in pictures)
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
