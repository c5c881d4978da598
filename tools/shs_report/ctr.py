"""The table and the picture of a set of shs-ctr runs.

    tools/shs-report ctr DIR [--svg FILE] [--svg-seconds FILE] [--order LABEL,...] [--markdown]
                         [--page FILE --block NAME --command CMD [--where guest|host]]
    tools/shs-report ctr --sync-only DIR [DIR ...] [--page ... as above]

reads DIR/<label>.rank<r>.json (written by `shs-ctr --out DIR`), and prints
one row per label: ranks, EPS (examples per second, summed over the ranks),
EPS relative to the run labelled "none", syncs per minute, time per sync
round, train NE (progressive, on each example before its update), eval NE
(mean over the ranks' own final models), eval NE relative to "single" (the
one-process reference), the eval NE of the average of the ranks' final
models (sync modes: one allreduce after training), AUC. With --svg, draws
rank 0's eval NE against examples seen (all ranks together), one line per
label; --svg-seconds, the same against the seconds since the pass started.
With --page and --block, also writes the markdown table as block
NAME of a results page (docs/results/ctr-modes.md holds the mode tables),
dated, with the machine (--where: the runs were in guests, the default, or
on this host) and CMD, the command that made DIR. --sync-only: runs of
`shs-ctr --sync-only S` (the engine alone, no workers), one row per run of
each DIR: parameters, ranks, syncs per minute and time per round.
"""
import argparse
import sys

from . import load_runs, mean, results_page

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
          "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def summarize(label, ranks):
    ranks = sorted(ranks, key=lambda r: r["rank"])
    size = ranks[0]["size"]
    s = {
        "label": label,
        "mode": ranks[0]["mode"],
        "ranks": len(ranks),
        "size": size,
        "complete": len(ranks) == size,
        "workers": ranks[0]["workers"],
        "params": ranks[0]["params"],
        "examples": sum(r["examples"] for r in ranks),
        "eps": sum(r["eps"] for r in ranks),
        "syncs_per_min": mean(r["syncs_per_min"] for r in ranks),
        "round_ms": mean(r["round_ms"] for r in ranks),
        "train_ne": mean(r["train_ne"] for r in ranks),
        "eval_ne": mean(r["eval_ne"] for r in ranks),
        "auc": mean(r["auc"] for r in ranks),
        "avg_ne": ranks[0].get("avg_ne", float("nan")),
        "errors": sum(r["errors"] for r in ranks),
        "ds": ranks[0].get("ds", 0),
        "fr_every": ranks[0].get("fr_every", 0),
        "interval_us": ranks[0].get("interval_us", 0),
    }
    # the curve: rank 0 evaluates every checkpoint (the other ranks only
    # their final model)
    s["curve"] = [(c[0], c[1]) for c in ranks[0].get("curve", [])]
    # the same points against the seconds since the pass started (runs
    # before 2026-12-05 did not record them)
    s["curve_t"] = [(c[3], c[1]) for c in ranks[0].get("curve", []) if len(c) > 3]
    return s


def table(rows, markdown):
    base = next((r for r in rows if r["label"] == "none"), None)
    ref = next((r for r in rows if r["label"] == "single"), None)
    head = ["mode", "ranks", "EPS", "EPS/none", "syncs/min", "ms/sync", "train NE",
            "eval NE", "NE/single", "avg-model NE", "AUC", "errors"]
    out = []
    for r in rows:
        sync = r["mode"] not in ("none", "single")
        out.append([
            r["label"] + ("" if r["complete"] else " (incomplete)"),
            str(r["size"]),
            f"{r['eps']:.0f}",
            f"{r['eps'] / base['eps']:.3f}" if base and r["size"] == base["size"] else "-",
            f"{r['syncs_per_min']:.1f}" if sync else "-",
            f"{r['round_ms']:.0f}" if sync else "-",
            f"{r['train_ne']:.4f}",
            f"{r['eval_ne']:.4f}",
            f"{r['eval_ne'] / ref['eval_ne']:.4f}" if ref else "-",
            f"{r['avg_ne']:.4f}" if sync else "-",
            f"{r['auc']:.4f}",
            str(r["errors"]),
        ])
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(row) + " |" for row in out]
        return "\n".join(lines)
    widths = [max(len(head[i]), *(len(row[i]) for row in out)) for i in range(len(head))]
    fmt = lambda row: "  ".join(c.rjust(w) if i else c.ljust(w)
                                for i, (c, w) in enumerate(zip(row, widths)))
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in out])


def sync_only_table(rows):
    o = ["| parameters | ranks | syncs/min | time per round |",
         "| ---: | ---: | ---: | ---: |"]
    for r in rows:
        ms = r["round_ms"]
        per = f"{ms / 1000:.1f} s" if ms >= 1000 else f"{ms:.0f} ms"
        o.append(f"| {r['params']} | {r['ranks']} | {r['syncs_per_min']:.1f} | {per} |")
    return "\n".join(o)


def nice_ticks(lo, hi, n=5):
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / n
    mag = 10 ** int(f"{raw:e}".split("e")[1])
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=raw)
    t = (lo // step) * step
    ticks = []
    while t <= hi + 1e-12:
        if t >= lo - 1e-12:
            ticks.append(round(t, 10))
        t += step
    return ticks


def svg(rows, path, title, seconds=False):
    """eval NE against examples seen (or, seconds=True, against the seconds
    since the pass started), one line per row; a row with "band" ("band_t")
    points (x, lo, hi) also gets that band shaded in its colour."""
    W, H, L, R, T, B = 760, 460, 80, 170, 40, 60
    key = "curve_t" if seconds else "curve"
    bkey = "band_t" if seconds else "band"
    rows = [dict(r, curve=r.get(key, []), band=r.get(bkey, [])) for r in rows]
    pts = [p for r in rows for p in r["curve"]]
    if not pts:
        return False
    xmax = max(p[0] for p in pts) * 1.02
    ys = [p[1] for p in pts] + [y for r in rows for b in r["band"] for y in b[1:]]
    ylo, yhi = min(ys), max(ys)
    pad = (yhi - ylo) * 0.08 or 0.01
    ylo, yhi = ylo - pad, yhi + pad
    X = lambda x: L + (W - L - R) * x / xmax
    Y = lambda y: T + (H - T - B) * (yhi - y) / (yhi - ylo)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
         f'font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">{title}</text>']
    for t in nice_ticks(ylo, yhi):
        o.append(f'<line x1="{L}" x2="{W - R}" y1="{Y(t):.1f}" y2="{Y(t):.1f}" stroke="#ddd"/>')
        o.append(f'<text x="{L - 6}" y="{Y(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    for t in nice_ticks(0, xmax):
        o.append(f'<line x1="{X(t):.1f}" x2="{X(t):.1f}" y1="{T}" y2="{H - B}" stroke="#eee"/>')
        lab = f"{t / 1000:g}k" if t >= 1000 and not seconds else f"{t:g}"
        o.append(f'<text x="{X(t):.1f}" y="{H - B + 16}" text-anchor="middle">{lab}</text>')
    o.append(f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" '
             f'stroke="black"/>')
    o.append(f'<text x="{(L + W - R) / 2}" y="{H - 18}" text-anchor="middle">'
             f'{"seconds since the pass started" if seconds else "examples seen (all ranks)"}'
             f'</text>')
    o.append(f'<text transform="translate(22,{(T + H - B) / 2}) rotate(-90)" '
             f'text-anchor="middle">eval NE (lower is better)</text>')
    # the spread over seeds first, under every line: mean +- one sd, shaded
    for i, r in enumerate(rows):
        if len(r["band"]) > 1:
            edge = ([f"{X(x):.1f},{Y(hi):.1f}" for x, _, hi in r["band"]] +
                    [f"{X(x):.1f},{Y(lo):.1f}" for x, lo, _ in reversed(r["band"])])
            o.append(f'<polygon points="{" ".join(edge)}" fill="{COLORS[i % len(COLORS)]}" '
                     f'fill-opacity="0.15" stroke="none"/>')
    for i, r in enumerate(rows):
        if not r["curve"]:
            continue
        c = COLORS[i % len(COLORS)]
        dash = ' stroke-dasharray="6,4"' if r["label"] in ("single", "none") else ""
        d = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in r["curve"])
        o.append(f'<polyline points="{d}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
        for x, y in r["curve"]:
            o.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="3" fill="{c}"/>')
        ly = T + 16 + 20 * i
        o.append(f'<line x1="{W - R + 12}" x2="{W - R + 40}" y1="{ly}" y2="{ly}" stroke="{c}" '
                 f'stroke-width="2"{dash}/>')
        o.append(f'<text x="{W - R + 46}" y="{ly + 4}">{r["label"]}</text>')
    o.append("</svg>")
    with open(path, "w") as fh:
        fh.write("\n".join(o) + "\n")
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(prog="shs-report ctr", description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="+")
    ap.add_argument("--svg")
    ap.add_argument("--svg-seconds", help="also the curves against wall-clock seconds")
    ap.add_argument("--order", help="comma-separated labels, in table order")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--sync-only", action="store_true",
                    help="runs of shs-ctr --sync-only: the engine's rate only")
    ap.add_argument("--title", default="CTR trainer: eval NE against examples seen")
    ap.add_argument("--page", help="results page to write the table to (with --block)")
    ap.add_argument("--block", help="name of the page's block, e.g. modes-all")
    ap.add_argument("--command", default="tools/ctr-run", help="the command that made DIR")
    ap.add_argument("--where", choices=("guest", "host"), default="guest")
    a = ap.parse_args(argv)
    rows = []
    for d in a.dir:
        runs = load_runs(d)
        if not runs:
            print(f"shs-report ctr: no results in {d}", file=sys.stderr)
            return 1
        rows += [summarize(k, v) for k, v in runs.items()]
    if a.order:
        order = a.order.split(",")
        rows.sort(key=lambda r: order.index(r["label"]) if r["label"] in order else len(order))
    text = sync_only_table(rows) if a.sync_only else table(rows, a.markdown)
    print(text)
    if a.svg and not a.sync_only and svg(rows, a.svg, a.title):
        print(f"picture: {a.svg}")
    if a.svg_seconds and not a.sync_only and svg(
            rows, a.svg_seconds, a.title.replace("examples seen", "seconds"), seconds=True):
        print(f"picture: {a.svg_seconds}")
    if a.page or a.block:
        if not (a.page and a.block):
            print("shs-report ctr: --page and --block go together", file=sys.stderr)
            return 2
        what = (f"{rows[0]['ranks']} ranks, the shadow engine alone (no workers)" if a.sync_only
                else f"{rows[0]['workers']} workers per rank, {rows[0]['params']} parameters")
        head = results_page.headline({"where": a.where, "command": a.command}, a.command, what)
        body = text if a.sync_only else table(rows, True)
        title = "The shadow engine alone" if a.sync_only else "CTR trainer: the modes"
        results_page.try_write_block(a.page, a.block, head + "\n\n" + body,
                                     "tools/shs-report ctr", title=title)
    return 0
