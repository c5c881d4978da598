"""restart-figures: the tables of tools/restart-figures, and its sampler.

    tools/shs-report restart-figures OUT [--page FILE | --no-page]
    tools/shs-report rdma-sample FILE     (until SIGTERM)

OUT holds plain-K.rank<r>.json and restart-K.rank<r>.json from shs-ctr (the
rejoiner's with "rejoined" and "rejoin_sync_s"), cycles.rank<r>.json, each
run's .log (the trainer's "killed (restart j of n) ... (at T s,
CLOCK_MONOTONIC)" and "rejoined: syncing again S s after its process started
(at T s, ...)" lines) and .rc (the launcher's status), cycles.samples (the
sampler's lines: monotonic time, pid, rank, queue pairs, registered regions)
and restart-figures.run (date, where, command, after, cycles, every). Writes
the block restart-figures of docs/results/restarts.md. Python 3 standard
library only.
"""
import os
import re
import signal
import statistics
import subprocess
import sys
import time

from . import label_numbers, load_ranks, results_page

KILL = re.compile(r"rank (\d+): killed \(restart (\d+) of \d+\) at ([0-9.]+) s into the pass "
                  r"\(at ([0-9.]+) s")
BACK = re.compile(r"rank (\d+): rejoined: syncing again ([0-9.]+) s after its process started "
                  r"\(at ([0-9.]+) s")


def read(path, default=""):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return default


def rc_of(out, label):
    text = read(os.path.join(out, label + ".rc")).strip()
    return int(text) if text.lstrip("-").isdigit() else None


def pairs(out):
    return label_numbers(out, "restart-")


def pct(a, b):
    return None if not a or not b else 100.0 * (a / b - 1.0)


def fmt(x, spec="%.2f"):
    return "-" if x is None else spec % x


def pair_rows(out):
    rows, sync_s, ne_d, avg_d = [], [], [], []
    for k in pairs(out):
        rs = {j["rank"]: j for j in load_ranks(out, "restart-%d" % k)}
        ps = {j["rank"]: j for j in load_ranks(out, "plain-%d" % k)}
        back = [j for j in rs.values() if j.get("rejoined")]
        surv = [j["eval_ne"] for j in rs.values() if not j.get("rejoined")]
        if not back or not surv or 0 not in rs or 0 not in ps:
            rows.append("| %d | incomplete (exit %s) | | | | | |" % (k, rc_of(out,
                                                                      "restart-%d" % k)))
            continue
        j = back[0]
        # the median: after a rejoin the replicas are not settled at the end,
        # and the rank that trains on alone last drifts (its calibration)
        d = pct(j["eval_ne"], statistics.median(surv))
        a = pct(rs[0]["avg_ne"], ps[0]["avg_ne"])
        sync_s.append(j["rejoin_sync_s"])
        ne_d.append(d)
        avg_d.append(a)
        rows.append("| %d | %.2f | %.5f / %.5f (%+.2f %%) | %s | %.5f / %.5f (%+.2f %%) | %d | "
                    "%s |" % (
            k, j["rejoin_sync_s"], j["eval_ne"], statistics.median(surv), d,
            " ".join("%.4f" % x for x in sorted(surv)), rs[0]["avg_ne"],
            ps[0]["avg_ne"], a, sum(x["failed_peers"] for x in rs.values()),
            rc_of(out, "restart-%d" % k)))
    head = ["| pair | rejoiner syncing again (s from its process start) | rejoiner's eval NE / "
            "survivors' median | survivors' eval NE | job's average-model NE / without a "
            "failure | failed peers at the end | exit |", "|---|---|---|---|---|---|---|"]
    summary = []
    if sync_s:
        summary.append("- the rejoiner was syncing again %.2f s after its process started "
                       "(median; max %.2f s, %d runs)" % (statistics.median(sync_s),
                                                          max(sync_s), len(sync_s)))
        summary.append("- its eval NE against the survivors' median: median %+.2f %% (largest "
                       "%+.2f %%); the job's average-model NE against the run without a "
                       "failure: median %+.2f %% (largest %+.2f %%)" % (
                           statistics.median(ne_d), max(ne_d, key=abs),
                           statistics.median(avg_d), max(avg_d, key=abs)))
    return head + rows, summary


def samples(out):
    """{pid: [(t, rank, qp, mr)]} from cycles.samples."""
    got = {}
    for line in read(os.path.join(out, "cycles.samples")).splitlines():
        f = line.split()
        if len(f) == 5:
            got.setdefault(int(f[1]), []).append((float(f[0]), int(f[2]), int(f[3]), int(f[4])))
    return got


def at(series, t):
    """The last sample at or before t (None: none)."""
    best = None
    for s in series:
        if s[0] <= t:
            best = s
    return best


def cycle_rows(out):
    log = read(os.path.join(out, "cycles.log"))
    if not log:
        return [], []
    kills = [(int(m.group(1)), float(m.group(4))) for m in KILL.finditer(log)]
    backs = [(int(m.group(1)), float(m.group(2)), float(m.group(3))) for m in BACK.finditer(log)]
    res = {j["rank"]: j for j in load_ranks(out, "cycles")}
    lines = ["- %d kills (ranks %s), %d rejoiners syncing again (%s s after their process "
             "started), launcher exit %s; at the end %s failed peers counted, job-wide "
             "steps %s" % (len(kills), ", ".join(str(k[0]) for k in kills), len(backs),
                            ", ".join("%.1f" % b[1] for b in backs), rc_of(out, "cycles"),
                            sum(j["failed_peers"] for j in res.values()) if res else "-",
                            "skipped" if "job-wide steps are skipped" in log else "run")]
    rows = []
    if kills and backs:
        t0, t1 = kills[0][1] - 0.3, max(b[2] for b in backs) + 1.0
        killed = {k[0] for k in kills}
        for pid, series in sorted(samples(out).items()):
            rank = series[0][1]
            if rank in killed or series[0][0] > t0 or series[-1][0] < t1:
                continue  # a process killed, or not alive over the whole window
            a, b = at(series, t0), at(series, t1)
            if a and b:
                rows.append("| %d (pid %d) | %d -> %d | %d -> %d |" % (rank, pid, a[2], b[2],
                                                                      a[3], b[3]))
    if rows:
        lines.append("")
        lines += ["| rank never killed | queue pairs before the first kill -> after the last "
                  "rejoin | registered regions |", "|---|---|---|"] + rows
    return lines, kills


def report(out):
    rows, summary = pair_rows(out)
    cyc, _ = cycle_rows(out)
    text = "\n".join(rows + [""] + summary)
    if cyc:
        text += "\n\nKill/restart cycles in one run:\n\n" + "\n".join(cyc)
    return text, bool(summary) or bool(cyc)


def main(argv):
    def load(out):
        text, complete = report(out)
        return out, text, complete

    def body(got, command):
        out, text, _ = got
        run = results_page.read_run(os.path.join(out, "restart-figures.run"))
        if command is not None:
            run["command"] = command
        return results_page.headline(
            run, "tools/restart-figures", "4 ranks of shs-ctr --mode s-ma (%s params), rank 2 "
            "killed (SIGKILL) %s s into the pass and started again by shs-launch --restart "
            "(it rejoins the running job), against the same run without a failure, "
            "alternating order; then %s kills of random ranks in one run, the first at 5 %% "
            "of the victim's share, then every %s %% (one rank down at a time)" % (
                run.get("params", "?"), run.get("after", "?"), run.get("cycles", "?"),
                run.get("every", "?"))) + "\n\n" + text

    return results_page.block_main(argv, "shs-report restart-figures", "restarts.md",
                                   "restart-figures", "tools/restart-figures", "Restarts",
                                   load, body, lambda got: got[2])


def _count(what):
    """{tgid: n} of the rdma tool's `resource show WHAT` lines, by the
    process of the task named in each."""
    try:
        text = subprocess.run(["rdma", "resource", "show", what], capture_output=True,
                              text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    got = {}
    for m in re.finditer(r" pid (\d+)", text):
        tgid = m.group(1)
        status = read("/proc/%s/status" % tgid)
        t = re.search(r"^Tgid:\s*(\d+)", status, re.M)
        if t:
            got[int(t.group(1))] = got.get(int(t.group(1)), 0) + 1
    return got


def _rank_of(pid):
    env = read("/proc/%d/environ" % pid).split("\0")
    for e in env:
        if e.startswith("SHS_RANK="):
            return int(e[9:]) if e[9:].isdigit() else -1
    return -1


def sample_main(argv):
    """Twice a second until SIGTERM: 't pid rank qp mr' for every process
    holding queue pairs or regions."""
    if len(argv) != 1:
        print("usage: shs-report rdma-sample FILE", file=sys.stderr)
        return 2
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    with open(argv[0], "w", encoding="utf-8") as f:
        while not stop:
            t = time.monotonic()
            qp, mr = _count("qp"), _count("mr")
            for pid in sorted(set(qp) | set(mr)):
                f.write("%.3f %d %d %d %d\n" % (t, pid, _rank_of(pid), qp.get(pid, 0),
                                                mr.get(pid, 0)))
            f.flush()
            time.sleep(0.5)
    return 0
