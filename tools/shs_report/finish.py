"""Write docs/results/s-ma-finish.md from the runs of tools/ctr-finish-compare.

    tools/shs-report finish-page OUT --seeds "3 4 5 6" --examples T --command CMD --page PAGE

OUT holds nofinish-<seed>/ and finish-<seed>/, each with s-ma.rank<r>.json
from shs-ctr. The page is rewritten whole: a dated table with, per seed and
end, the ranks' eval NE, their spread, the spread of bias + b2 (the output
biases, which every example writes) and the averaged model's NE.
"""
import argparse
import datetime
import os
import platform
import sys

from . import load_ranks, spread


def row(seed, end, ranks):
    ne = [r["eval_ne"] for r in ranks]
    return (f"| {seed} | {end} | {' '.join(f'{x:.4f}' for x in ne)} | "
            f"{spread(ne):.4f} | {spread(r['bias'] + r['b2'] for r in ranks):.3f} | "
            f"{ranks[0]['avg_ne']:.4f} |")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="shs-report finish-page")
    ap.add_argument("out")
    ap.add_argument("--seeds", required=True)
    ap.add_argument("--examples", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--page", required=True)
    a = ap.parse_args(argv)
    rows = []
    for s in a.seeds.split():
        for end, sub in (("stop only", "nofinish"), ("finish", "finish")):
            ranks = load_ranks(os.path.join(a.out, f"{sub}-{s}"), "s-ma")
            if len(ranks) == 0:
                print(f"shs-report finish-page: no results for seed {s} ({sub})", file=sys.stderr)
                return 1
            rows.append(row(s, end, ranks))
    today = datetime.date.today().isoformat()
    text = f"""# S-MA: the end of a run, with and without shs_shadow_finish

Measured {today} on host {platform.node()} ({os.cpu_count()} cores, QEMU TCG guest,
Soft-RoCE), 4 ranks x 2 Hogwild workers of the CTR trainer (`shs-ctr`,
165k parameters), {a.examples} training examples, 50000 held out, S-MA over
all ranks. Command: `{a.command}` (written by it).

"stop only": each rank evaluates its own model as its last background round
left it, plus what its workers did since (`--no-finish`). "finish": after the
stop every rank calls `shs_shadow_finish`, which replaces each replica by the
exact mean. NE: eval normalized entropy of each rank's own final model (lower
is better); bias + b2 spread: max - min over the ranks of the model's two
output biases summed (a shift of the logit of every prediction alike).

| seed | end | eval NE, ranks 0-3 | NE spread | bias + b2 spread | averaged model NE |
|---|---|---|---|---|---|
""" + "\n".join(rows) + """

Why: a background round applies its result as a delta and keeps what the
workers did meanwhile (shadow.h). The output biases are written by every
example, and within one round (thousands of examples per rank) they wander
by about the noise of SGD itself; a rank's own model at the end carries its
last round's wander, a shift of all its predictions: worse NE at the same
AUC. The mean of the ranks' models has none of it.
"""
    with open(a.page, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"shs-report finish-page: wrote {a.page}")
    return 0
