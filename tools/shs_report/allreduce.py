"""allreduce_report: the tables of tools/allreduce-compare.

    allreduce_report.py RES --mtu M --command CMD [--page FILE | --no-page]

RES holds the raw outputs of one guest run (ours.n<N>.txt, gloo.n<N>.txt,
mpi.n<N>.txt, ds.n<N>.txt, wire.n<N>.cli*.txt). Prints busbw of the median
call against Gloo and Open MPI, DS-Sync rounds against the full allreduce,
the wire limit and the goals of issue 5; then writes the block
allreduce-mtu<M> of docs/results/allreduce.md (dated, with the machine and
CMD). With --rounds, RES holds r<R>.<ours|gloo>.n<N>.<size>.txt of
allreduce-compare --rounds instead, and the block is allreduce-rounds-mtu<M>:
per round Gloo's median call over our p50, their median over the rounds, and
our p99/p50 against Gloo's max/median. Python 3 standard library only.
"""
import argparse
import glob
import os
import re
import statistics

from . import results_page

SIZES_BIG = (65536, 1048576, 16777216)


def rows(res, name):
    """size -> (p50 us, wrong) from a benchmark output (our column layout)."""
    out = {}
    path = os.path.join(res, name + ".txt")
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if len(fields) == 10 and not line.startswith("#") and fields[0].isdigit():
                out[int(fields[0])] = (float(fields[8]), float(fields[7]))
    return out


def busbw(size, p50, n):
    return size / p50 * 2 * (n - 1) / n  # bytes/us = MB/s


def human(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def cell(v, fmt="{:8.2f}"):
    return fmt.format(v) if v is not None else "    fail"


def md(v, fmt="{:.2f}"):
    return fmt.format(v) if v is not None else "fail"


def wire(res, n):
    tot = 0.0
    for p in glob.glob(os.path.join(res, f"wire.n{n}.cli*.txt")):
        with open(p, encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 4 and fields[0] == "1048576":
                    tot += float(fields[3])
    return tot


def report(res):
    """(text for the terminal, markdown for the page)."""
    out, page = [], []
    out.append("\n== allreduce, float sum, busbw (MB/s) from the median call; ratio = ours / peer")
    out.append(f"{'N':>2} {'size':>7} {'ours':>8} {'gloo-ib':>8} {'ratio':>6} {'mpi-tcp':>8} "
               f"{'ratio':>6}  #wrong ours/gloo/mpi")
    page += ["| N | size | ours | Gloo ibverbs | ours/Gloo | Open MPI TCP | ours/MPI | "
             "#wrong ours/Gloo/MPI |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    summary = {}
    for n in (4, 8):
        o, g, m = rows(res, f"ours.n{n}"), rows(res, f"gloo.n{n}"), rows(res, f"mpi.n{n}")
        for s in SIZES_BIG:
            bo = busbw(s, o[s][0], n) if s in o else None
            bg = busbw(s, g[s][0], n) if s in g else None
            bm = busbw(s, m[s][0], n) if s in m else None
            rg = bo / bg if bo and bg else None
            rm = bo / bm if bo and bm else None
            summary[(n, s)] = (bo, bg, bm)
            w = "/".join(str(int(x[s][1])) if s in x else "-" for x in (o, g, m))
            out.append(f"{n:>2} {human(s):>7} {cell(bo)} {cell(bg)} {cell(rg, '{:6.2f}')} "
                       f"{cell(bm)} {cell(rm, '{:6.2f}')}  {w}")
            page.append(f"| {n} | {human(s)} | {md(bo)} | {md(bg)} | {md(rg)} | {md(bm)} | "
                        f"{md(rm)} | {w} |")

    out.append("\n== DS-Sync rounds (hypercube, g = 2) vs full allreduce, median time per call")
    out.append(f"{'N':>2} {'size':>7} {'full(us)':>11} {'dssync(us)':>11} {'speedup':>8}")
    page += ["", "DS-Sync rounds (hypercube, g = 2) against the full allreduce, median "
             "time per call:", "",
             "| N | size | full (us) | DS-Sync (us) | speedup |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for n in (4, 8):
        o, d = rows(res, f"ours.n{n}"), rows(res, f"ds.n{n}")
        for s in sorted(set(o) & set(d)):
            out.append(f"{n:>2} {human(s):>7} {o[s][0]:11.1f} {d[s][0]:11.1f} "
                       f"{o[s][0] / d[s][0]:8.2f}")
            page.append(f"| {n} | {human(s)} | {o[s][0]:.1f} | {d[s][0]:.1f} | "
                        f"{o[s][0] / d[s][0]:.2f} |")

    out.append("\n== wire limit at 16 MiB: busbw * n (ours) vs n concurrent ib_write_bw streams")
    out.append(f"{'N':>2} {'ours busbw*n':>13} {'n x ib_write_bw':>16} {'fraction':>9}")
    page += ["", "Wire limit at 16 MiB: our busbw * n against n concurrent `ib_write_bw` "
             "streams (MB/s):", "",
             "| N | ours busbw * n | n x ib_write_bw | fraction |",
             "| ---: | ---: | ---: | ---: |"]
    wire_total = {}
    for n in (4, 8):
        tot = wire(res, n)
        wire_total[n] = tot
        bo = summary.get((n, 16777216), (None,))[0]
        frac = bo * n / tot if bo and tot else None
        out.append(f"{n:>2} {cell(bo * n if bo else None, '{:13.1f}')} {tot:16.1f} "
                   f"{cell(frac, '{:9.2f}')}")
        page.append(f"| {n} | {md(bo * n if bo else None, '{:.1f}')} | {tot:.1f} | "
                    f"{md(frac)} |")

    out.append("\n== goals of issue 5")
    page += ["", "Goals of issue 5:", ""]

    def goal(name, v, bar):
        if v is None:
            text = f"{name}: no figure"
        else:
            text = f"{name}: {v:.2f} (goal >= {bar}) {'met' if v >= bar else 'MISSED'}"
        out.append("  " + text)
        page.append("- " + text)

    for n in (4, 8):
        for s in (1048576, 16777216):
            bo, bg, _ = summary.get((n, s), (None, None, None))
            goal(f"ours / Gloo, N={n}, {human(s)}", bo / bg if bo and bg else None, 1.2)
    for n in (4, 8):
        bo = summary.get((n, 16777216), (None,))[0]
        tot = wire_total.get(n)
        goal(f"busbw*n / n x ib_write_bw, N={n}, 16 MiB", bo * n / tot if bo and tot else None,
             0.8)
    o, d = rows(res, "ours.n8"), rows(res, "ds.n8")
    for s, bar in ((4096, 4.0), (16777216, 1.5)):
        goal(f"DS-Sync g=2 speedup, N=8, {human(s)}",
             o[s][0] / d[s][0] if s in o and s in d else None, bar)

    for p in sorted(glob.glob(os.path.join(res, "*.rc"))):
        if os.path.exists(p[:-3] + ".err"):  # one of the runs, not the harness's
            with open(p, encoding="utf-8") as f:
                rc = f.read().strip()
            out.append(f"note: {os.path.basename(p)[:-3]} exited with {rc} (see {p[:-3]}.err)")
            page.append(f"- note: {os.path.basename(p)[:-3]} exited with {rc}")
    return "\n".join(out), "\n".join(page)


def round_rows(res):
    """{(n, size): {round: {"ours": (p50, p99), "gloo": (median, max)}}} and
    {round: the tool that ran first} from the r<R>.<tool>.n<N>.<size>.txt of
    --rounds (p99 is the max below 100 calls)."""
    got, first = {}, {}
    for p in glob.glob(os.path.join(res, "r*.*.n*.*.txt")):
        m = re.match(r"r(\d+)\.(ours|bf16|gloo)\.n(\d+)\.[^.]+\.txt$", os.path.basename(p))
        if not m:
            continue
        rnd, tool, n = int(m.group(1)), m.group(2), int(m.group(3))
        first[rnd] = "ours" if rnd % 2 == 1 else "gloo"
        with open(p, encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                if len(fields) == 10 and not line.startswith("#") and fields[0].isdigit():
                    got.setdefault((n, int(fields[0])), {}).setdefault(rnd, {})[tool] = (
                        float(fields[8]), float(fields[9]))
    return got, first


def rounds_report(res):
    """(text, markdown) of --rounds: per round Gloo median / ours p50, the
    median over the rounds, ours p99/p50 against Gloo max/median."""
    got, first = round_rows(res)
    out = ["\n== ours against Gloo over rounds (ours first in odd rounds); ratio = Gloo median "
           "call / ours p50 (> 1: ours faster)",
           f"{'N':>2} {'size':>7} {'round':>5} {'first':>5} {'ours p50':>10} {'gloo med':>10} "
           f"{'ratio':>6} {'ours p99/p50':>12} {'gloo max/med':>12}"]
    page = ["| N | size | round | first | ours p50 (us) | Gloo median (us) | Gloo / ours | "
            "ours p99/p50 | Gloo max/median |",
            "| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    bf16 = any("bf16" in r for rounds in got.values() for r in rounds.values())
    summary = ["", "Over the rounds (medians):", "",
               "| N | size | rounds | Gloo / ours | ours p99/p50 | Gloo max/median |" +
               (" Gloo / ours bf16 | ours bf16 p99/p50 |" if bf16 else ""),
               "| ---: | ---: | ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if bf16 else "")]
    for (n, s) in sorted(got):
        ratios, so, sg, rb, sb = [], [], [], [], []
        for rnd in sorted(got[(n, s)]):
            r = got[(n, s)][rnd]
            o, g, b = r.get("ours"), r.get("gloo"), r.get("bf16")
            if b and g:
                rb.append(g[0] / b[0])
            if b:
                sb.append(b[1] / b[0])
            ratio = g[0] / o[0] if o and g else None
            spo = o[1] / o[0] if o else None
            spg = g[1] / g[0] if g else None
            for v, acc in ((ratio, ratios), (spo, so), (spg, sg)):
                if v is not None:
                    acc.append(v)
            out.append(f"{n:>2} {human(s):>7} {rnd:>5} {first[rnd]:>5} "
                       f"{cell(o[0] if o else None, '{:10.0f}')} "
                       f"{cell(g[0] if g else None, '{:10.0f}')} {cell(ratio, '{:6.2f}')} "
                       f"{cell(spo, '{:12.2f}')} {cell(spg, '{:12.2f}')}")
            page.append(f"| {n} | {human(s)} | {rnd} | {first[rnd]} | "
                        f"{md(o[0] if o else None, '{:.0f}')} | "
                        f"{md(g[0] if g else None, '{:.0f}')} | {md(ratio)} | {md(spo)} | "
                        f"{md(spg)} |")

        def med(xs):
            return statistics.median(xs) if xs else None
        out.append(f"{n:>2} {human(s):>7} {'median':>11} {'':>21} {cell(med(ratios), '{:6.2f}')} "
                   f"{cell(med(so), '{:12.2f}')} {cell(med(sg), '{:12.2f}')}")
        summary.append(f"| {n} | {human(s)} | {len(got[(n, s)])} | {md(med(ratios))} | "
                       f"{md(med(so))} | {md(med(sg))} |" +
                       (f" {md(med(rb))} | {md(med(sb))} |" if bf16 else ""))
    notes = []
    for p in sorted(glob.glob(os.path.join(res, "r*.rc"))):
        with open(p, encoding="utf-8") as f:
            rc = f.read().strip()
        out.append(f"note: {os.path.basename(p)[:-3]} exited with {rc} (see {p[:-3]}.err)")
        notes.append(f"- note: {os.path.basename(p)[:-3]} exited with {rc}")
    return "\n".join(out), "\n".join(summary[1:] + ([""] + notes if notes else []) +
                                      ["", "Per round:", ""] + page)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("res")
    ap.add_argument("--mtu", default="1500")
    ap.add_argument("--command", default="tools/allreduce-compare")
    ap.add_argument("--page", default=results_page.page_path("allreduce.md"))
    ap.add_argument("--no-page", action="store_true")
    ap.add_argument("--rounds", action="store_true",
                    help="the runs of --rounds: block allreduce-rounds-mtu<M>")
    a = ap.parse_args(argv)
    if a.rounds:
        return main_rounds(a)
    text, table = report(a.res)
    print(text)
    write_page(a, "allreduce", "float sum, busbw (MB/s) of the median call", table)
    return 0


def write_page(a, block, what, table):
    """The dated block <block>-mtu<M> of the page (unless --no-page)."""
    if a.no_page:
        return
    head = (f"Measured {results_page.today()} on {results_page.machine()}, all ranks in one "
            f"guest, guest MTU {a.mtu}; {what}. Command: `{a.command}`.\n\n")
    name = f"{block}-mtu{a.mtu}"
    path = results_page.write_block(a.page, name, head + table, "tools/allreduce-compare",
                                    title="Allreduce: shadowsync, Gloo and Open MPI")
    print(f"allreduce-compare: wrote block {name} of {path}")


def main_rounds(a):
    text, table = rounds_report(a.res)
    print(text)
    write_page(a, "allreduce-rounds",
               "float sum, ours (zero-copy region) against Gloo's ibverbs "
               "AllreduceRingChunked, the order alternating (ours first in odd rounds); Gloo / "
               "ours = Gloo's median call over our p50 (> 1: ours faster); p99 is the max below "
               "100 calls", table)
    return 0
