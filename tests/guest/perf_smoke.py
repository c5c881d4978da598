#!/usr/bin/env python3
"""Guest test of tools/shs-perf: every test type runs a few iterations between
two processes on this machine's RDMA device, with --check and --json. Only
what is exact is asserted: the output parses, every size asked for is there,
--check passed, the iteration counts are the ones asked for, every figure is a
finite, non-negative number. Never a speed: a host under load may run slowly.

usage: perf_smoke.py PATH/TO/shs-perf
       perf_smoke.py PATH/TO/shs-perf --sweep [-n ITERS]
--sweep: every test type over all sizes (-a: 2 B .. 8 MiB) with --check. In a
guest of `tools/shs-vm -n 2` (SHS_VM_COUNT=2) guest 0 runs the servers and
guest 1 the clients against it, across the link; elsewhere both run here.
Exit: 0 pass, 1 fail, 77 no RDMA device (CTest "Not Run").
"""
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from shs_report import free_port  # noqa: E402

TIMEOUT = 120
LAT_KEYS = ["t_min_us", "t_max_us", "t_typical_us", "t_avg_us", "t_stdev_us", "p99_us",
            "p99_9_us"]
BW_KEYS = ["bw_peak", "bw_avg", "msg_rate_mpps"]
# order statistics of one sorted sample, printed alike: exact, whatever the load
LAT_ORDER = ["t_min_us", "t_typical_us", "p99_us", "p99_9_us", "t_max_us"]


def run_pair(perf, test, args, env_mode=False):
    """Server and client of one test; returns the client's parsed JSON lines."""
    port = free_port()
    common = [perf, test, "--json", "--check"] + args
    if env_mode:  # ranks from the environment, as under mpirun
        envs = [dict(os.environ, SHS_RANK=str(r), SHS_SIZE="2",
                     SHS_BOOTSTRAP="127.0.0.1:%d" % port) for r in (0, 1)]
        cmds = [common, common]
    else:
        envs = [os.environ, os.environ]
        cmds = [common + ["-p", str(port)], common + ["-p", str(port), "127.0.0.1"]]
    procs = [subprocess.Popen(c, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for c, e in zip(cmds, envs)]
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError("%s %s: no result within %d s" % (test, args, TIMEOUT))
        if p.returncode != 0:
            raise AssertionError("%s %s: exit %d: %s" % (test, args, p.returncode, err.strip()))
        outs.append(out)
    rows = [json.loads(line) for line in outs[1].splitlines() if line.strip()]
    if not rows:
        raise AssertionError("%s %s: the client printed no result" % (test, args))
    return rows


def sweep(perf, iters):
    """All test types, all sizes, --check; across two guests when in one."""
    tests = ["%s_%s" % (op, k) for k in ("lat", "bw")
             for op in ("read", "write", "write_imm", "send")]
    sizes = [2 << i for i in range(23)]
    count = int(os.environ.get("SHS_VM_COUNT", "1"))
    index = int(os.environ.get("SHS_VM_INDEX", "0"))
    server_host = os.environ.get("SHS_VM_PEERS", "").split(" ")[0]
    failed = 0
    for i, test in enumerate(tests):
        args = ["-a", "-n", str(iters)]
        try:
            if count < 2:
                rows = run_pair(perf, test, args)
            else:
                cmd = [perf, test, "--json", "--check", "-p", str(18540 + i)] + args
                if index == 1:
                    cmd.append(server_host)
                p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, timeout=TIMEOUT * 3)
                if p.returncode != 0:
                    raise AssertionError("%s: exit %d: %s" % (test, p.returncode,
                                                              p.stderr.strip()))
                if index == 0:  # the server reports nothing: its exit status is its word
                    print("ok   %-13s server" % test)
                    continue
                rows = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
            check_rows(test, args, rows, sizes, iters)
            print("ok   %-13s %d sizes checked, 8 MiB: %s" % (
                test, len(rows), rows[-1].get("bw_avg", rows[-1].get("t_typical_us"))))
        except (AssertionError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
            print("FAIL %s" % e)
            failed += 1
    print("%s: sweep, %d of %d test types%s" % (
        "PASS" if not failed else "FAIL", len(tests) - failed, len(tests),
        " (two guests, guest %d)" % index if count >= 2 else ""))
    return 1 if failed else 0


def want_iterations(test, args):
    """The count a row reports for these arguments: -n (default 1000 latency,
    5000 bandwidth), both sides' with -b; None with -D (as many as fit)."""
    if "-D" in args:
        return None
    lat = test.endswith("_lat")
    n = int(args[args.index("-n") + 1]) if "-n" in args else (1000 if lat else 5000)
    return 2 * n if "-b" in args else n


def check_rows(test, args, rows, want_sizes, iters=None):
    lat = test.endswith("_lat")
    keys = LAT_KEYS if lat else BW_KEYS
    want_iters = iters if iters is not None else want_iterations(test, args)
    sizes = [r["bytes"] for r in rows]
    if sizes != want_sizes:
        raise AssertionError("%s %s: sizes %s, expected %s" % (test, args, sizes, want_sizes))
    for r in rows:
        n = r["iterations"]
        if (r["test"] != test or r.get("check") != "ok" or type(n) is not int or n < 0 or
                (want_iters is not None and n != want_iters) or
                (not lat and r["bw_unit"] != "MB/s")):
            raise AssertionError("%s %s: bad row %s (expected %s iterations, check ok)" % (
                test, args, r, want_iters if want_iters is not None else "any"))
        for k in keys:
            v = r[k]
            if type(v) not in (int, float) or not math.isfinite(v) or v < 0:
                raise AssertionError("%s %s: %s is %r in %s" % (test, args, k, v, r))
        if lat:
            order = [r[k] for k in LAT_ORDER]
            if order != sorted(order):
                raise AssertionError("%s %s: %s out of order in %s" % (
                    test, args, " <= ".join(LAT_ORDER), r))


def main():
    argv = sys.argv[1:]
    do_sweep = "--sweep" in argv
    iters = 5
    if "-n" in argv:
        iters = int(argv[argv.index("-n") + 1])
        del argv[argv.index("-n"):argv.index("-n") + 2]
    argv = [a for a in argv if a != "--sweep"]
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    perf = argv[0]
    if not os.path.isdir("/sys/class/infiniband") or not os.listdir("/sys/class/infiniband"):
        print("no RDMA device (/sys/class/infiniband is empty): skipped", file=sys.stderr)
        return 77
    if do_sweep:
        return sweep(perf, iters)
    cases = []
    for op in ["read", "write", "write_imm", "send"]:
        cases.append(("%s_lat" % op, ["-n", "20", "-s", "8"], [8], False))
        cases.append(("%s_bw" % op, ["-n", "40", "-s", "4096"], [4096], False))
    cases += [
        ("write_bw", ["-a", "-n", "3"], [2 << i for i in range(23)], False),
        ("read_bw", ["-n", "20", "-s", "65537", "-q", "2"], [65537], False),
        ("send_bw", ["-n", "30", "-s", "1000", "-b"], [1000], False),
        ("write_imm_bw", ["-D", "1", "-s", "2048", "-b"], [2048], False),
        ("write_bw", ["-n", "20", "-s", "100000", "-t", "4", "--oob"], [100000], False),
        ("send_lat", ["-n", "20", "-s", "64"], [64], True),
        ("read_lat", ["-n", "10", "-s", "8388608"], [8388608], False),
    ]
    failed = 0
    for test, args, sizes, env_mode in cases:
        try:
            rows = run_pair(perf, test, args, env_mode)
            check_rows(test, args, rows, sizes)
            print("ok   %-13s %-28s %d row(s)" % (test, " ".join(args), len(rows)))
        except (AssertionError, ValueError, KeyError) as e:
            print("FAIL %s" % e)
            failed += 1
    print("%s: %d of %d cases" % ("PASS" if not failed else "FAIL", len(cases) - failed,
                                    len(cases)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
