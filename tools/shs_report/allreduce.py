"""The report of tools/allreduce-compare: busbw of ours against Gloo's
ibverbs ring and MPI, DS-Sync rounds against the full allreduce, the wire
limit, and the goals of issue 5.

    tools/shs-report allreduce-compare RESULTS SIZE...
"""
import glob
import os


def main(argv):
    res, big = argv[0], [int(x) for x in argv[1:]]
    report(res, big)
    return 0


def rows(res, name):
    """size -> (p50 us, wrong) from a benchmark output (our column layout)."""
    out = {}
    path = os.path.join(res, name + ".txt")
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            f = line.split()
            if len(f) == 10 and not line.startswith("#") and f[0].isdigit():
                out[int(f[0])] = (float(f[8]), float(f[7]))
    return out


def busbw(size, p50, n):
    return size / p50 * 2 * (n - 1) / n  # bytes/us = MB/s


def human(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def cell(v, fmt="{:8.2f}"):
    return fmt.format(v) if v is not None else "    fail"


def report(res, big):
    print("\n== allreduce, float sum, busbw (MB/s) from the median call; ratio = ours / peer")
    print(f"{'N':>2} {'size':>7} {'ours':>8} {'gloo-ib':>8} {'ratio':>6} {'mpi-tcp':>8} {'ratio':>6}  #wrong ours/gloo/mpi")
    summary = {}
    for n in (4, 8):
        o, g, m = rows(res, f"ours.n{n}"), rows(res, f"gloo.n{n}"), rows(res, f"mpi.n{n}")
        for s in big:
            bo = busbw(s, o[s][0], n) if s in o else None
            bg = busbw(s, g[s][0], n) if s in g else None
            bm = busbw(s, m[s][0], n) if s in m else None
            rg = bo / bg if bo and bg else None
            rm = bo / bm if bo and bm else None
            summary[(n, s)] = (bo, bg, bm)
            w = "/".join(str(int(x[s][1])) if s in x else "-" for x in (o, g, m))
            print(f"{n:>2} {human(s):>7} {cell(bo)} {cell(bg)} {cell(rg, '{:6.2f}')} {cell(bm)} {cell(rm, '{:6.2f}')}  {w}")

    print("\n== DS-Sync rounds (hypercube, g = 2) vs full allreduce, median time per call")
    print(f"{'N':>2} {'size':>7} {'full(us)':>11} {'dssync(us)':>11} {'speedup':>8}")
    for n in (4, 8):
        o, d = rows(res, f"ours.n{n}"), rows(res, f"ds.n{n}")
        for s in sorted(set(o) & set(d)):
            print(f"{n:>2} {human(s):>7} {o[s][0]:11.1f} {d[s][0]:11.1f} {o[s][0] / d[s][0]:8.2f}")

    print("\n== wire limit at 16 MiB: busbw * n (ours) vs n concurrent ib_write_bw streams")
    print(f"{'N':>2} {'ours busbw*n':>13} {'n x ib_write_bw':>16} {'fraction':>9}")
    wire_total = {}
    for n in (4, 8):
        tot = 0.0
        for p in glob.glob(os.path.join(res, f"wire.n{n}.cli*.txt")):
            for line in open(p):
                f = line.split()
                if len(f) >= 4 and f[0] == "1048576":
                    tot += float(f[3])
        wire_total[n] = tot
        bo = summary.get((n, 16777216), (None,))[0]
        frac = bo * n / tot if bo and tot else None
        print(f"{n:>2} {cell(bo * n if bo else None, '{:13.1f}')} {tot:16.1f} {cell(frac, '{:9.2f}')}")

    print("\n== goals of issue 5")
    def goal(name, v, bar):
        if v is None:
            print(f"  {name}: no figure")
        else:
            print(f"  {name}: {v:.2f} (goal >= {bar}) {'met' if v >= bar else 'MISSED'}")
    for n in (4, 8):
        for s in (1048576, 16777216):
            bo, bg, bm = summary.get((n, s), (None, None, None))
            goal(f"ours / gloo, N={n}, {human(s)}", bo / bg if bo and bg else None, 1.2)
    for n in (4, 8):
        bo = summary.get((n, 16777216), (None,))[0]
        tot = wire_total.get(n)
        goal(f"busbw*n / n x ib_write_bw, N={n}, 16 MiB", bo * n / tot if bo and tot else None, 0.8)
    o, d = rows(res, "ours.n8"), rows(res, "ds.n8")
    for s, bar in ((4096, 4.0), (16777216, 1.5)):
        goal(f"DS-Sync g=2 speedup, N=8, {human(s)}",
             o[s][0] / d[s][0] if s in o and s in d else None, bar)

    for p in sorted(glob.glob(os.path.join(res, "*.rc"))):
        if os.path.exists(p[:-3] + ".err"):  # one of the runs above, not the harness's
            print(f"note: {os.path.basename(p)[:-3]} exited with {open(p).read().strip()}"
                  f" (see {p[:-3]}.err)")
