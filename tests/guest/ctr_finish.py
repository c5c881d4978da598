#!/usr/bin/env python3
"""The end of a run: after shs_shadow_finish every rank holds the same model.

    ctr_finish.py SHS_LAUNCH SHS_CTR

Runs 4 ranks of shs-ctr in S-MA (small model, one pass), twice: without
shs_shadow_finish (--no-finish), where each rank's own model carries the
drift of its workers since its last round (the output biases, which every
example writes, differ most: printed, not asserted, since it depends on
timing), and with it (the default), where every rank's final model must be
the same: the same output biases and the same eval NE, to the printed digit.
Asserts behaviour, not speed. Exit status: 0 pass, 1 fail, 77 no RDMA device.
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from guestpy import launcher_and_program  # noqa: E402
from shs_report import load_ranks, spread  # noqa: E402

N = 4


def run(launch, ctr, out, label, extra):
    cmd = [launch, "-n", str(N), "--need-rdma", "--timeout", "200", "--",
           ctr, "--mode", "s-ma", "--workers", "2", "--params", "20000",
           "--examples", "160000", "--eval", "4000", "--checkpoints", "1",
           "--out", out, "--label", label] + extra
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=240)
    sys.stdout.write(p.stdout)
    if p.returncode != 0:
        return p.returncode, []
    ranks = load_ranks(out, label)
    if [r["rank"] for r in ranks] != list(range(N)):
        print(f"FAIL: {label}: results of ranks {[r['rank'] for r in ranks]}, expected 0-{N - 1}")
        return 1, []
    return 0, ranks


def main():
    launch, ctr = launcher_and_program(__doc__)
    with tempfile.TemporaryDirectory() as out:
        rc, before = run(launch, ctr, out, "nofinish", ["--no-finish"])
        if rc != 0:
            return 77 if rc == 77 else 1
        rc, after = run(launch, ctr, out, "finish", [])
        if rc != 0:
            return 77 if rc == 77 else 1
    for name, ranks in (("without finish", before), ("with finish", after)):
        print(f"{name}: bias + b2 spread over ranks "
              f"{spread(r['bias'] + r['b2'] for r in ranks):.6f}, "
              f"eval NE spread {spread(r['eval_ne'] for r in ranks):.6f}, rounds "
              f"{[r['rounds'] for r in ranks]}")
    bad = [k for k in ("bias", "b2", "eval_ne", "auc") if spread(r[k] for r in after) != 0]
    if bad:
        print(f"FAIL: after shs_shadow_finish the ranks' final models differ in {bad}")
        return 1
    if any(r["rounds"] == 0 for r in after):
        print("FAIL: a rank synced no round")
        return 1
    print("PASS ctr finish: every rank's final model is the same")
    return 0


if __name__ == "__main__":
    sys.exit(main())
