#!/usr/bin/env python3
"""Fault test (issue 7): kill -9 one of 4 ranks during S-MA training.

    fault_kill.py SHS_LAUNCH SHS_CTR_FAULT [--victim R] [shs-ctr options...]

Runs 4 ranks of shs-ctr-fault (the trainer with fault injection) under
shs-launch; rank 2 (or R: 0 is the bootstrap's root) sends itself SIGKILL when
30% of its pass is done (raise(SIGKILL): the same as kill -9 from outside,
nothing of the process runs after it). The survivors must detect the
failure (each says which peer failed, once), keep syncing (rounds after the
failure > 0 on every survivor), finish their pass, evaluate, meet at the
final barrier (among the living: shs_ctx_barrier) and exit 0;
detection must come within the configured bounds (SHS_OP_TIMEOUT_MS plus
SHS_SHADOW_WAIT_MS: the transport's and the engine's waits). Asserts
behaviour, not speed. Exit status: 0 pass, 1 fail, 77 no RDMA device.
"""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from shs_report import failure_report, finished, kill_time  # noqa: E402

VICTIM = 2
N = 4


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    launch, ctr = sys.argv[1], sys.argv[2]
    extra = sys.argv[3:]
    victim = VICTIM
    if extra[:1] == ["--victim"]:
        victim, extra = int(extra[1]), extra[2:]
    if not os.path.isdir("/sys/class/infiniband") or not os.listdir("/sys/class/infiniband"):
        print("no RDMA device: skipped")
        return 77
    op_ms = int(os.environ.get("SHS_OP_TIMEOUT_MS", "10000"))
    wait_ms = int(os.environ.get("SHS_SHADOW_WAIT_MS", "30000"))
    cmd = [launch, "-n", str(N), "--need-rdma", "--timeout", "200",
           "--expect-kill", str(victim), "--",
           ctr, "--mode", "s-ma", "--workers", "1", "--params", "20000",
           "--examples", "120000", "--eval", "2000", "--checkpoints", "2",
           "--kill-rank", str(victim), "--kill-at", "0.3", "--hold", "60"] + extra
    print("+", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=240)
    out = p.stdout
    sys.stdout.write(out)
    bad = []
    if p.returncode == 77:
        return 77
    if p.returncode != 0:
        bad.append("shs-launch exited with %d" % p.returncode)
    killed_at = kill_time(out, victim)
    if killed_at is None:
        bad.append("the victim never killed itself")
    bound = (op_ms + wait_ms) / 1000.0
    for r in range(N):
        if r == victim:
            continue
        f = failure_report(out, r)
        if f is None:
            bad.append("rank %d did not report the failed peer" % r)
            continue
        nfail, seen, rounds_after = f["failed"], f["seen"], f["rounds_after"]
        # a survivor that finishes its pass late may also see an early
        # finisher go away during its last rounds (counted if it did not
        # see that peer's "stopped" first): at least the victim
        if nfail < 1:
            bad.append("rank %d counts no failed peer" % r)
        det = seen - (killed_at or 0.0)
        print("rank %d: detected after %.3f s, %d rounds after the failure" %
              (r, det, rounds_after))
        if killed_at is not None and not (0 <= det <= bound):
            bad.append("rank %d saw the failure %.3f s after the kill (bound %.0f s)" %
                       (r, det, bound))
        if rounds_after < 1:
            bad.append("rank %d ran no round after the failure" % r)
        if not finished(out, r, N):
            bad.append("rank %d did not finish its pass and evaluate" % r)
        logs = re.findall(r"shadowsync\[rank %d\] warn: shadow: peer %d failed" % (r, victim),
                          out)
        if len(logs) != 1:
            bad.append("rank %d logged the failed peer %d times, expected once" %
                       (r, len(logs)))
        # the survivors meet at the final barrier, among the living
        if "shs-ctr rank %d: final barrier failed" % r in out:
            bad.append("rank %d: the final barrier among the survivors failed" % r)
    for b in bad:
        print("FAIL:", b)
    if bad:
        return 1
    print("PASS fault kill (%s) in %.1f s" % (" ".join(extra) or "pull", time.monotonic() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
