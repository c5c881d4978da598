"""Write the block "overhead" of docs/results/python.md from the runs of
tools/python-overhead.

    tools/shs-report python-overhead OUT --command CMD [--page P | --no-page]

OUT holds SIDE-KIND.REP.txt, SIDE c or py, KIND allreduce, sync or lookup:
c-allreduce is shs-allreduce-bench's table (p50 in the 9th column), the
others one JSON line with p50_us. The block: per kind, the median over the
repetitions of each side's p50, and Python's over C's.
"""
import glob
import json
import os
import re
import statistics

from . import results_page

KINDS = (("allreduce", "allreduce, 1M float32 in a registered region", 1.05),
         ("sync", "foreground sync round (FR-MA), 1M-float model", 1.05),
         ("lookup", "lookup of 4096 uniform ids, 1M x 16 table", 1.10))


def p50(path, side, kind):
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if side == "c" and kind == "allreduce":
                cols = line.split()
                if cols and not line.startswith("#") and len(cols) >= 10:
                    return float(cols[8])
            elif line.startswith("{"):
                return float(json.loads(line)["p50_us"])
    return None


def load(out):
    """{(side, kind): [p50 of each repetition]}"""
    got = {}
    for f in sorted(glob.glob(os.path.join(out, "*.txt"))):
        m = re.match(r"(c|py)-(\w+)\.(\d+)\.txt$", os.path.basename(f))
        if m:
            v = p50(f, m.group(1), m.group(2))
            if v is not None:
                got.setdefault((m.group(1), m.group(2)), []).append(v)
    return got


def body(got, command):
    reps = max((len(v) for v in got.values()), default=0)
    lines = [results_page.headline(
        {"where": "guest"}, command,
        "4 ranks in one guest, C and Python in alternating order, %d repetition(s); "
        "each figure the median over the repetitions of a run's p50" % reps), "",
        "| call | C p50 (us) | Python p50 (us) | Python / C | goal |",
        "| --- | ---: | ---: | ---: | ---: |"]
    for kind, what, goal in KINDS:
        c, py = got.get(("c", kind)), got.get(("py", kind))
        if not c or not py:
            continue
        mc, mp = statistics.median(c), statistics.median(py)
        lines.append("| %s | %.0f | %.0f | %.3f | <= %.2f |" % (what, mc, mp, mp / mc, goal))
    return "\n".join(lines) + "\n"


def main(argv=None):
    return results_page.block_main(
        argv, "shs-report python-overhead", "python.md", "overhead",
        "tools/python-overhead", "Python: the binding against C",
        load, body, bool)
