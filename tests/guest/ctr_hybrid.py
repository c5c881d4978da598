#!/usr/bin/env python3
"""The hybrid trainer end to end: sharded tables plus a shadow-synced dense part.

    ctr_hybrid.py SHS_LAUNCH SHS_CTR

Runs 4 ranks x 2 workers of shs-ctr --model dlrm in S-MA for a short pass
(a Criteo-shaped log, 26 fields in one sharded table, row-wise Adagrad on
the holders, the DLRM dense part synced in the background) and checks:
every rank reports; the averaged model beats a constant predictor (eval NE
below 0.98: a constant at the base rate scores 1.0); every row gradient sent
was applied by its holder, exactly once (the ranks' sent and applied counts
add up to the same total); no lookup or update failed; the shadow thread
synced. Then the exported model: the run saves it (--save: the averaged
dense part, the tables' shards), and --eval-only loads it into 2 ranks (a
re-sharding) and must score exactly the averaged model's eval NE and AUC.
Last, a replicated model too large for this machine (4 times its memory
over the ranks) must be refused by every rank with the figures and the way
out (--tables sharded), not end with a rank killed by the OOM killer.
Asserts behaviour, not speed. Exit status: 0 pass, 1 fail, 77 no
RDMA device.
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from guestpy import launcher_and_program  # noqa: E402
from shs_report import load_ranks  # noqa: E402

N = 4
NE_CONSTANT_MARGIN = 0.98


def launch_ranks(launch, n, argv):
    """(exit status, output) of n ranks of argv"""
    cmd = [launch, "-n", str(n), "--need-rdma", "--timeout", "240", "--"] + argv
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=280)
    sys.stdout.write(p.stdout)
    return p.returncode, p.stdout


def run(launch, n, argv):
    rc, _ = launch_ranks(launch, n, argv)
    return 0 if rc == 0 else 77 if rc == 77 else 1


def mem_total_bytes():
    with open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 1 << 32


def too_big(launch, ctr):
    """A replicated S-MA model whose ranks together would need about 4x this
    machine's memory (dim 64: 256 bytes a row, 4 copies a rank, 4 ranks)."""
    rows = mem_total_bytes() // 1024
    rc, out = launch_ranks(launch, N, [ctr, "--mode", "s-ma", "--model", "dlrm", "--tables",
                                       "replicated", "--rows", str(rows), "--dim", "64",
                                       "--examples", "4000", "--eval", "100", "--workers",
                                       "1"])
    failures = []
    if rc == 0:
        failures.append(f"a replicated model of {rows} rows x 64 started on this machine")
    if rc == 77:
        return []
    if rc > 128 or "signal" in out:
        failures.append(f"the too-large model ended with status {rc}, not refused")
    if "needs about" not in out or "--tables sharded" not in out:
        failures.append("the refusal does not say what the model needs and the way out")
    return failures


def main():
    launch, ctr = launcher_and_program(__doc__)
    with tempfile.TemporaryDirectory() as out:
        model = os.path.join(out, "model")
        rc = run(launch, N, [ctr, "--mode", "s-ma", "--model", "dlrm", "--workers", "2",
                             "--rows", "50000", "--examples", "40000", "--eval", "2000",
                             "--save", model, "--out", out, "--label", "hybrid"])
        if rc != 0:
            return rc
        ranks = load_ranks(out, "hybrid")
        rc = run(launch, 2, [ctr, "--mode", "none", "--eval-only", model, "--out", out,
                             "--label", "reload"])
        if rc != 0:
            return rc
        reload = load_ranks(out, "reload")
    if [r["rank"] for r in ranks] != list(range(N)):
        print(f"FAIL: results of ranks {[r['rank'] for r in ranks]}, expected 0-{N - 1}")
        return 1
    sent = sum(r["update_rows"] for r in ranks)
    applied = sum(r["applied_rows"] for r in ranks)
    avg_ne = ranks[0]["avg_ne"]
    print(f"hybrid: averaged-model eval NE {avg_ne:.4f}, rows sent {sent}, applied {applied}, "
          f"rounds {[r['rounds'] for r in ranks]}, emb errors "
          f"{[r['emb_errors'] for r in ranks]}")
    failures = []
    if not avg_ne < NE_CONSTANT_MARGIN:
        failures.append(f"averaged-model eval NE {avg_ne:.4f} is no better than a constant")
    if sent == 0 or sent != applied:
        failures.append(f"{sent} row updates sent, {applied} applied")
    if any(r["emb_errors"] != 0 for r in ranks):
        failures.append("lookups or updates failed")
    if any(r["rounds"] == 0 for r in ranks):
        failures.append("a rank synced no round")
    if any(r["lookup_ids"] == 0 or r["rows_remote"] == 0 for r in ranks):
        failures.append("a rank looked up nothing, or nothing from another holder")
    exported = [(r["eval_ne"], r["auc"]) for r in reload]
    print(f"exported model on 2 ranks: {exported}; the run's averaged model: "
          f"{(avg_ne, ranks[0]['avg_auc'])}")
    if len(reload) != 2 or any(e != (avg_ne, ranks[0]["avg_auc"]) for e in exported):
        failures.append("the exported model, reloaded, does not score the averaged model's NE")
    failures += too_big(launch, ctr)
    for f in failures:
        print(f"FAIL: {f}")
    if failures:
        return 1
    print("PASS ctr hybrid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
