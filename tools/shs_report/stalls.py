"""stall-figures: the table of tools/stall-figures.

    tools/shs-report stall-figures OUT [--page FILE | --no-page]

OUT holds nostall-K.rank<r>.json and stall3-K.rank<r>.json from shs-ctr
--sync-only (each with its rounds once a second, "sync_series"),
stall3-K.log (the launcher's output, with rank 3's "stalled (SIGSTOP) at T s"
and "continued (SIGCONT) at T s" lines) and stall-figures.run (date, where,
command, after, for, secs). For each pair K and each survivor: syncs per
minute before, during and after the stall, against the same windows of the
run without one; the seconds and rounds from the straggler's SIGCONT until
the survivor's rate over the next 3 s is back to 0.9 of the run without a
stall; then the medians over survivors and pairs. Writes the block
stall-figures of docs/results/stalls.md. Python 3 standard library only.
"""
import argparse
import os
import re
import statistics
import sys

from . import label_numbers, load_ranks, results_page

STALLED = 3
SURVIVORS = (0, 1, 2)
BACK = 0.9     # "back to its rate": this share of the run without a stall
BACK_SPAN = 3  # over this many seconds


def rounds_at(series, t):
    """Rounds at time t, linear between the samples (None: outside them)."""
    for (t0, r0), (t1, r1) in zip(series, series[1:]):
        if t0 <= t <= t1:
            return r0 + (r1 - r0) * (t - t0) / (t1 - t0) if t1 > t0 else r0
    return None


def rate(series, a, b):
    """Syncs per minute over [a, b] (None when the series does not cover it)."""
    ra, rb = rounds_at(series, a), rounds_at(series, b)
    if ra is None or rb is None or b <= a:
        return None
    return (rb - ra) / (b - a) * 60.0


def stall_times(out, label):
    """(stopped at, continued at) in s since the pass started, from the log."""
    try:
        with open(os.path.join(out, label + ".log"), encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None, None
    a = re.search(r"rank %d stalled \(SIGSTOP\) at ([0-9.]+) s" % STALLED, text)
    b = re.search(r"rank %d continued \(SIGCONT\) at ([0-9.]+) s" % STALLED, text)
    return (float(a.group(1)) if a else None), (float(b.group(1)) if b else None)


def recovery(series, base, t_cont, end):
    """(seconds, rounds) from t_cont until the rate over the next BACK_SPAN s
    is at least BACK x base (None: not within the run)."""
    r0 = rounds_at(series, t_cont)
    t = t_cont
    while t + BACK_SPAN <= end:
        got = rate(series, t, t + BACK_SPAN)
        if got is not None and got >= BACK * base:
            return t - t_cont, rounds_at(series, t) - r0
        t += 0.25
    return None


def fmt(x, spec="%.0f"):
    return "-" if x is None else spec % x


def pairs(out):
    return label_numbers(out, "stall3-")


def report(out):
    run = results_page.read_run(os.path.join(out, "stall-figures.run"))
    secs = float(run.get("secs", 90))
    rows, during, after, rec_s, rec_r, own_after = [], [], [], [], [], []
    for k in pairs(out):
        st = {j["rank"]: j for j in load_ranks(out, "stall3-%d" % k)}
        ns = {j["rank"]: j for j in load_ranks(out, "nostall-%d" % k)}
        t_stop, t_cont = stall_times(out, "stall3-%d" % k)
        if t_stop is None or t_cont is None or not ns:
            continue
        win = {"before": (min(5.0, t_stop / 2), t_stop - 0.5),
               "during": (t_stop + 1.0, t_cont - 0.5),
               "after": (t_cont + BACK_SPAN, secs - 1.0)}
        for r in SURVIVORS:
            if r not in st or r not in ns:
                continue
            s, n = st[r]["sync_series"], ns[r]["sync_series"]
            got = {w: rate(s, a, b) for w, (a, b) in win.items()}
            base = {w: rate(n, a, b) for w, (a, b) in win.items()}
            rec = recovery(s, rate(n, win["before"][0], secs - 1.0) or 0.0, t_cont, secs)
            if got["during"] is not None and base["during"]:
                during.append(got["during"] / base["during"])
            if got["after"] is not None and base["after"]:
                after.append(got["after"] / base["after"])
            if rec is not None:
                rec_s.append(rec[0])
                rec_r.append(rec[1])
            rows.append((k, r, got, base, rec, st[r].get("straggler_skips", 0),
                         st[r].get("errors", 0), st[r].get("failed_peers", 0)))
        if STALLED in st and STALLED in ns:
            s, n = st[STALLED]["sync_series"], ns[STALLED]["sync_series"]
            a, b = win["after"]
            g, base = rate(s, a, b), rate(n, a, b)
            if g is not None and base:
                own_after.append(g / base)
            rows.append((k, STALLED, {"before": rate(s, *win["before"]), "during": None,
                                      "after": g},
                         {w: rate(n, a_, b_) for w, (a_, b_) in win.items()}, None,
                         st[STALLED].get("straggler_skips", 0), st[STALLED].get("errors", 0),
                         st[STALLED].get("failed_peers", 0)))
    page = ["| pair | rank | before | during | after | no stall: before / during / after | "
            "back after (s, rounds) | skips | errors | failed |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for k, r, got, base, rec, skips, errs, failed in rows:
        page.append("| %d | %d%s | %s | %s | %s | %s / %s / %s | %s | %d | %d | %d |" % (
            k, r, " (stalled)" if r == STALLED else "", fmt(got["before"]),
            fmt(got["during"]), fmt(got["after"]), fmt(base["before"]), fmt(base["during"]),
            fmt(base["after"]),
            "-" if rec is None else "%.2f, %.0f" % rec, skips, errs, failed))
    med = statistics.median
    summary = []
    if during:
        summary.append("- survivors' syncs per minute during the stall / the same window "
                       "without one: median %.2f (min %.2f, max %.2f, %d survivor runs)"
                       % (med(during), min(during), max(during), len(during)))
    if after:
        summary.append("- survivors' syncs per minute after it / without one: median %.2f "
                       "(min %.2f)" % (med(after), min(after)))
    if rec_s:
        summary.append("- back to %.0f %% of the rate without a stall (over %d s): median "
                       "%.2f s, %.0f rounds after the SIGCONT (max %.2f s, %.0f rounds)"
                       % (BACK * 100, BACK_SPAN, med(rec_s), med(rec_r), max(rec_s),
                          max(rec_r)))
    if own_after:
        summary.append("- the stalled rank's rate after it continued / without a stall: "
                       "median %.2f" % med(own_after))
    return "\n".join(page + [""] + summary), bool(rows), run


def main(argv):
    ap = argparse.ArgumentParser(prog="shs-report stall-figures")
    ap.add_argument("out")
    ap.add_argument("--page", default=results_page.page_path("stalls.md"))
    ap.add_argument("--no-page", action="store_true")
    a = ap.parse_args(argv)
    text, complete, run = report(a.out)
    print(text)
    if not complete:
        print("stall-figures: no complete pair of runs in %s" % a.out, file=sys.stderr)
        return 1
    if not a.no_page:
        head = results_page.headline(
            run, "tools/stall-figures", "4 ranks of shs-ctr --sync-only (the S-MA shadow "
            "engine alone, all ranks in one group), rank 3 stopped (SIGSTOP) for %s s at %s s, "
            "against the same run without a stall, alternating order; syncs per minute"
            % (run.get("for", "?"), run.get("after", "?")))
        results_page.try_write_block(a.page, "stall-figures", head + "\n\n" + text,
                                     "tools/stall-figures", title="Stragglers")
    return 0
