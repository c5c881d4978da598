"""shs_report: the project's reporting and output checks, in one place.

Everything that reads what the programs write: the CTR trainer's JSON per
rank and its log lines (tools/demo, ctr-run, ctr-tradeoff, fault-figures,
ctr-finish-compare and the guest tests that run the trainer), the
allreduce comparison's benchmark outputs, CTest's JUnit files (run-tests).
Run it as tools/shs-report COMMAND ... (see __main__.py) or import it.
Python 3 standard library only.
"""
import glob
import json
import os
import re
import socket
from collections import OrderedDict


def load_runs(d, pattern="*.rank*.json"):
    """DIR/<label>.rank<r>.json -> {label: [rank dicts, by rank]}, labels sorted."""
    runs = OrderedDict()
    for f in sorted(glob.glob(os.path.join(d, pattern))):
        m = re.match(r"(.*)\.rank(\d+)\.json$", os.path.basename(f))
        if not m:
            continue
        with open(f, encoding="utf-8") as fh:
            runs.setdefault(m.group(1), []).append(json.load(fh))
    for ranks in runs.values():
        ranks.sort(key=lambda r: r["rank"])
    return runs


def label_numbers(d, prefix):
    """The K of every DIR/<prefix>K.rank<r>.json, sorted (the pairs of a figures run)."""
    ks = set()
    for f in glob.glob(os.path.join(d, glob.escape(prefix) + "*.rank*.json")):
        m = re.match(re.escape(prefix) + r"(\d+)\.rank", os.path.basename(f))
        if m:
            ks.add(int(m.group(1)))
    return sorted(ks)


def load_ranks(d, label):
    """The rank dicts of one label, by rank ([] when there are none)."""
    return load_runs(d, glob.escape(label) + ".rank*.json").get(label, [])


def mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def spread(values):
    values = list(values)
    return max(values) - min(values)


def kill_time(out, rank):
    """CLOCK_MONOTONIC second at which a rank of shs-ctr-fault killed itself
    ("rank R: SIGKILL to itself at T s"), or None."""
    m = re.search(r"rank %d: SIGKILL to itself at ([0-9.]+) s" % rank, out)
    return float(m.group(1)) if m else None


def failure_report(out, rank):
    """A survivor's line about its failed peers: {"failed", "seen", "eps_after",
    "rounds_after"}, or None when the rank printed none."""
    m = re.search(r"rank %d: (\d+) failed peer\(s\), first seen at ([0-9.]+) s .*?"
                  r"after it: ([0-9.]+) EPS, (\d+) rounds" % rank, out)
    if not m:
        return None
    return {"failed": int(m.group(1)), "seen": float(m.group(2)),
            "eps_after": float(m.group(3)), "rounds_after": int(m.group(4))}


def finished(out, rank, size):
    """Whether a rank's line of a finished pass and evaluation is in out."""
    return re.search(r"rank %d/%d: \d+ examples in .* eval NE [0-9.]+" % (rank, size),
                     out) is not None


def free_port(kind="tcp"):
    """A port on 127.0.0.1 that is free now (tcp or udp)."""
    s = socket.socket(type=socket.SOCK_DGRAM if kind == "udp" else socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
