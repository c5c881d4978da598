#!/usr/bin/env python3
"""Restart test (issue 20): ranks of the CTR trainer killed and started again.

    ctr_restart.py SHS_LAUNCH SHS_CTR [--victim R|any] [--restarts K] [shs-ctr options...]

Runs 4 ranks of shs-ctr (S-MA) under `shs-launch --restart`: the victim
kills itself (--restart-rank, at 10 % of its share, then every 20 %, one
rank down at a time: each kill after the previous victim is back) and the
launcher starts it again with SHS_REJOIN=1. The job must exit 0; after each
kill the new process says it is syncing again; every final process counts
no failed peer (the rejoiners were taken back); no rank skips the job-wide
steps (the final average runs with the rejoiners); a rejoined
rank's eval NE is within 2 % of the others' mean (it caught up). Asserts
behaviour, not speed; prints the times. Exit status: 0 pass, 1 fail, 77 no
RDMA device.
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

from guestpy import launcher_program_args

N = 4
NE_TOL = 0.02


def main():
    launch, ctr, extra = launcher_program_args(__doc__)
    victim, restarts = "2", 1
    while extra[:1] in (["--victim"], ["--restarts"]):
        if extra[0] == "--victim":
            victim = extra[1]
        else:
            restarts = int(extra[1])
        extra = extra[2:]
    # Sized so that the last rejoiner, killed at half its share and back
    # after up to ~35 s on a loaded host, ends well inside the launcher's
    # 240 s: 2.5M examples for 3 restarts once ran past it.
    examples = 900000 if restarts == 1 else 300000 * (restarts + 1)
    out_dir = tempfile.mkdtemp(prefix="shs-restart-")
    cmd = [launch, "-n", str(N), "--need-rdma", "--timeout", "240", "--restart", victim, "--",
           ctr, "--mode", "s-ma", "--workers", "1", "--params", "20000",
           "--examples", str(examples), "--eval", "4000",
           "--checkpoints", "2", "--restart-rank", victim, "--restart-after", "10%",
           "--restarts", str(restarts), "--restart-every", "20%", "--out", out_dir,
           "--label", "restart"] + extra
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=280)
    out = p.stdout
    sys.stdout.write(out)
    if p.returncode == 77:
        return 77
    bad = []
    if p.returncode != 0:
        bad.append("shs-launch exited with %d" % p.returncode)
    kills = re.findall(r"rank (\d+): killed \(restart (\d+) of", out)
    back = re.findall(r"rank (\d+): rejoined: syncing again ([0-9.]+) s after", out)
    print("kills: %s; syncing again after (s from process start): %s" %
          ([int(k[0]) for k in kills], [float(b[1]) for b in back]))
    if len(kills) != restarts:
        bad.append("%d kills, expected %d" % (len(kills), restarts))
    if len(back) != len(kills):
        bad.append("%d kills but %d rejoiners syncing again" % (len(kills), len(back)))
    res = {}
    for f in glob.glob(os.path.join(out_dir, "restart.rank*.json")):
        with open(f) as fh:
            j = json.load(fh)
        res[j["rank"]] = j
    if sorted(res) != list(range(N)):
        bad.append("results of ranks %s, expected 0..%d" % (sorted(res), N - 1))
    if "job-wide steps are skipped" in out:
        bad.append("a rank skipped the job-wide steps (the final average without the "
                   "rejoiners)")
    rejoined = [r for r, j in res.items() if j.get("rejoined")]
    for r, j in sorted(res.items()):
        print("rank %d: eval NE %.5f, avg NE %.5f, rejoined %s, failed peers %d" %
              (r, j["eval_ne"], j["avg_ne"], bool(j.get("rejoined")), j["failed_peers"]))
        if j["failed_peers"] != 0:
            bad.append("rank %d counts %d failed peers at the end" % (r, j["failed_peers"]))
    others = [j["eval_ne"] for r, j in res.items() if r not in rejoined]
    if rejoined and others:
        ref = sum(others) / len(others)
        for r in rejoined:
            d = res[r]["eval_ne"] / ref - 1
            print("rank %d (rejoined): eval NE %+.2f %% against the others' mean" % (r, 100 * d))
            if abs(d) > NE_TOL:
                bad.append("rejoined rank %d's NE is %+.1f %% off the others'" % (r, 100 * d))
    elif restarts > 0:
        bad.append("no rank reports that it rejoined")
    for b in bad:
        print("FAIL:", b)
    print("PASS" if not bad else "FAIL")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
