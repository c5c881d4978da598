#!/usr/bin/env python3
"""A killed rank raises shadowsync.PeerFailed on the others, within the bound.

    shs-launch -n 4 --expect-kill 3 -- python3 peer_failed.py

Rank 3 SIGKILLs itself after a barrier; the others keep calling allreduce
(and then a foreground shadow round) and must get PeerFailed (not a hang,
not another error) within the op timeout plus a margin. Exit status 0 on
every surviving rank that saw it, 1 otherwise.
"""
import os
import signal
import sys
import time

import numpy as np

import shadowsync

BOUND_S = 60.0  # the op timeout (SHS_OP_TIMEOUT_MS, 10 s by default) and a wide margin


def main():
    ctx = shadowsync.Context()
    coll = shadowsync.Collective(ctx, stage_bytes=1 << 16)
    x = np.ones(1024, dtype=np.float32)
    coll.allreduce(x)
    ctx.barrier()
    if ctx.rank == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < BOUND_S:
            coll.allreduce(x)
    except shadowsync.PeerFailed as e:
        took = time.monotonic() - t0
        print(f"rank {ctx.rank}: PeerFailed after {took:.2f} s: {e}", flush=True)
        ok = took < BOUND_S and e.status_name == "SHS_ERR_PEER_FAILED"
    except shadowsync.Error as e:
        print(f"rank {ctx.rank}: FAIL: {type(e).__name__} instead of PeerFailed: {e}", flush=True)
        ok = False
    else:
        print(f"rank {ctx.rank}: FAIL: no error in {BOUND_S} s", flush=True)
        ok = False
    # the objects go without a barrier: the job is broken
    coll.close(barrier=False)
    ctx.close(barrier=False)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
