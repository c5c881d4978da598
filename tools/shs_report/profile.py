"""The block allreduce-profile-mtu<M> of docs/results/allreduce-profile.md,
from the raw outputs of tools/allreduce-profile.

    python3 -m shs_report.profile RES [--page P | --no-page]

RES holds, per tool (ours, gloo) and size (1m, 16m): spread.<tool>.<size>.txt
(the benchmark's table: p50 and p99 of --iters calls), prof.<tool>.<size>.txt
and .meta (the profile run), perf.<tool>.<size>.report.txt (perf report
--no-children --sort dso,sym -g none -n), perf.<tool>.<size>.comm.txt (the
same by process) and perf.<tool>.<size>.script.gz (perf script with call
chains), and run.txt (date, command, mtu) that the host side wrote.

Samples are put in groups in two ways:
  - flat: by the sampled symbol alone (what perf report shows);
  - attributed: by the first frame of the call chain, leaf first, that
    belongs to a group, after skipping the frames where interrupts are
    enabled again (_raw_spin_unlock_irqrestore and the like). Under TCG the
    sampling timer cannot fire while interrupts are off, so the time of an
    irq-off section is charged to the instruction that turns them back on:
    the flat view piles it on _raw_spin_unlock_irqrestore; the attributed
    view gives it to the caller (rxe, 9p, the scheduler...).
Python 3 standard library only.
"""
import argparse
import gzip
import os
import re
import sys
from collections import Counter

from . import results_page

TOOLS = (("ours", "shadowsync"), ("gloo", "Gloo"))
UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def find_sizes(res):
    """[(name, bytes)] of the sizes in RES (spread.<tool>.<size>.txt), smallest first."""
    got = set()
    for p in os.listdir(res) if os.path.isdir(res) else ():
        m = re.match(r"(?:spread|prof)\.\w+\.(\d+)([kmg]?)\.txt$", p, re.I)
        if m:
            got.add((m.group(1) + m.group(2), int(m.group(1)) * UNITS[m.group(2).lower()]))
    return sorted(got, key=lambda x: x[1])

# group -> (title, order). The order of GROUPS is the order of the columns.
GROUPS = (
    ("rxe", "rxe + network + softirq (kernel)"),
    ("kcopy", "kernel copies + checksums"),
    ("kzero", "kernel zeroing (memset: init_on_alloc of skb data)"),
    ("ksched", "kernel: syscalls, scheduler, timers, irq"),
    ("kother", "kernel: other"),
    ("reduce", "reduce kernel (user)"),
    ("umemcpy", "memcpy (user)"),
    ("wait", "polling / waiting (user)"),
    ("verbs", "verbs provider, other (user)"),
    ("uother", "other user code"),
    ("idle", "idle"),
)
SHORT = {"rxe": "rxe/net", "kcopy": "k copy/csum", "kzero": "k memset", "ksched": "k sched/sys", "kother": "k other",
         "reduce": "reduce", "umemcpy": "u memcpy", "wait": "u poll/wait",
         "verbs": "u verbs", "uother": "u other", "idle": "idle"}

# frames where interrupts come back on: the samples of an irq-off section
# land there (see above); skipped by the attributed view
IRQ_ON = re.compile(r"^(_raw_(spin|read|write)_unlock_(irqrestore|irq|bh)|__local_bh_enable_ip|"
                    r"local_bh_enable|arch_local_irq_(restore|enable)|finish_task_switch.*)$")

KERNEL_RULES = (
    ("idle", re.compile(r"^(default_idle(_call)?|do_idle|cpu_idle\w*|cpuidle\w*|"
                        r"(pv_)?native_safe_halt|acpi_idle\w*|intel_idle\w*|mwait_idle\w*|"
                        r"poll_idle|arch_cpu_idle\w*|cpu_startup_entry|start_secondary)$")),
    ("kzero", re.compile(r"^(memset\w*|__memset\w*|clear_page\w*)$")),
    ("kcopy", re.compile(r"(memcpy|memmove|copy_user|rep_movs|copy_to_user|copy_from_user|"
                         r"copy_page|_copy_to_iter|_copy_from_iter|copyout|copyin|skb_copy|"
                         r"crc32|crc_|csum|icrc)")),
    ("rxe", re.compile(r"^(rxe_|rdma_|ib_|uverbs|__ib_|veth_|__netif|netif_|net_rx_action|"
                       r"napi_|__napi|ip_|__ip_|udp_|__udp|udp4_|skb_|__skb|dev_|__dev_|neigh_|"
                       r"sch_direct_xmit|__qdisc|qdisc_|kfree_skb|consume_skb|__alloc_skb|"
                       r"__kfree_skb|process_backlog|__do_softirq|do_softirq|tasklet_|"
                       r"run_ksoftirqd|__netdev|validate_xmit|fib_|ipv4_|nf_|copy_data|"
                       r"prepare_|do_task|do_complete|do_req|do_resp|check_|send_ack|"
                       r"__rxe|read_reply)")),
    ("ksched", re.compile(r"^(schedule\w*|__schedule|__cond_resched|try_to_wake_up|wake_up\w*|"
                          r"__wake_up\w*|hrtimer\w*|__hrtimer\w*|do_nanosleep|\w*nanosleep\w*|"
                          r"futex\w*|__futex\w*|do_futex|do_syscall_64|entry_SYSCALL\w*|"
                          r"syscall_\w*|__x64_sys_\w*|exit_to_user_mode\w*|sched_\w*|__sched_\w*|"
                          r"pick_next\w*|enqueue_\w*|dequeue_\w*|update_\w*|ktime_get\w*|tick_\w*|"
                          r"__sysvec_\w*|sysvec_\w*|asm_sysvec\w*|irq_\w*|__irq_\w*|rcu_\w*|"
                          r"do_sched_yield|yield\w*|__perf\w*|perf_\w*|context_switch|"
                          r"switch_mm\w*|__switch_to\w*|timerqueue\w*|clockevents\w*|"
                          r"lapic_\w*|native_write_msr\w*|native_apic\w*|ttwu_\w*|select_task_rq\w*|"
                          r"do_epoll_wait|ep_poll\w*|do_sys_poll|do_poll|ksys_read|vfs_read|"
                          r"raw_spin_rq\w*|load_balance|newidle_balance|__calc_delta|"
                          r"psi_\w*|account_\w*|cpuacct_\w*|cgroup_rstat\w*)$")),
)

USER_RULES = (
    ("reduce", re.compile(r"(^shs__reduce_|gloo::(sum|product|min|max)\b|ReductionFunction)")),
    ("umemcpy", re.compile(r"(^__)?mem(cpy|move)")),
    ("wait", re.compile(r"(^shs__waiter|^shs__poll|^shs__coll_poll|^shs_poll_imm|"
                        r"^(credit|hdr|fence|settle)_poll$|ibv_poll_cq|poll_cq|"
                        r"nanosleep|sched_yield|pthread_cond|__futex|futex_|^__lll_lock_wait|"
                        r"ibv_get_cq_event|^epoll_wait$|^__poll$|^poll$|"
                        r"gloo::transport::ibverbs::Pair::(wait|poll)|waitUntil|waitRecv|"
                        r"waitSend|cq_ex|rxe_start_poll|rxe_next_poll|rxe_end_poll)")),
)
VERBS_DSO = re.compile(r"(librxe|libibverbs|librdmacm)")


def is_kernel(dso):
    return dso.startswith("[") and dso != "[unknown]" or dso == "[kernel.kallsyms]"


def classify_frame(sym, dso):
    """The group of one frame, or None when no rule matches it."""
    if is_kernel(dso):
        for group, rule in KERNEL_RULES:
            if rule.search(sym):
                return group
        if dso in ("[rdma_rxe]", "[ib_core]", "[ib_uverbs]", "[rdma_ucm]", "[veth]"):
            return "rxe"
        return None
    for group, rule in USER_RULES:
        if rule.search(sym):
            return group
    if VERBS_DSO.search(dso):
        return "verbs"
    return None


def fallback(sym, dso):
    return "kother" if is_kernel(dso) else "uother"


def classify_flat(sym, dso):
    return classify_frame(sym, dso) or fallback(sym, dso)


def classify_chain(frames):
    """frames: [(sym, dso)], leaf first."""
    k = 0
    while k < len(frames) - 1 and IRQ_ON.match(frames[k][0]):
        k += 1
    for sym, dso in frames[k:]:
        g = classify_frame(sym, dso)
        if g is not None:
            return g
    return fallback(*frames[k])


# perf report -n --sort dso,sym: "  12.34%   1234  [kernel.kallsyms]  [k] default_idle"
REPORT_LINE = re.compile(r"^\s*([\d.]+)%\s+(\d+)\s+(\S+)\s+\[(.)\]\s+(.*?)\s*$")
COMM_LINE = re.compile(r"^\s*([\d.]+)%\s+(\d+)\s+(.*?)\s*$")


def read_rows(path, pattern, pick):
    """[pick(match)] of the lines of a flat perf report that match pattern
    (none when the file is missing)."""
    rows = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = pattern.match(line)
                if m and not line.startswith("#"):
                    rows.append(pick(m))
    except FileNotFoundError:
        pass
    return rows


def read_report(path):
    """[(samples, dso, sym)] of a flat perf report."""
    return read_rows(path, REPORT_LINE, lambda m: (int(m.group(2)), m.group(3), m.group(5)))


def read_comm(path):
    """[(samples, command)] of a perf report sorted by comm."""
    return read_rows(path, COMM_LINE, lambda m: (int(m.group(2)), m.group(3)))


def read_script(path):
    """[(comm, [(sym, dso)] leaf first)] of `perf script -F comm,tid,ip,sym,dso`."""
    samples, comm, frames = [], None, []
    try:
        f = gzip.open(path, "rt", encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return samples
    with f:
        for line in f:
            if not line.strip():
                if comm is not None and frames:
                    samples.append((comm, frames))
                comm, frames = None, []
            elif line[0] in " \t":
                body = line.strip()
                _ip, _sp, rest = body.partition(" ")
                sym, _sp, dso = rest.rpartition(" (")
                dso = dso.rstrip(")")
                dso = "[" + os.path.basename(dso.strip("[]")) + "]" if dso.startswith("[") \
                    else os.path.basename(dso)
                sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
                frames.append((sym, dso))
            else:
                if comm is not None and frames:
                    samples.append((comm, frames))
                comm = line.split()[0]
                frames = []
    if comm is not None and frames:
        samples.append((comm, frames))
    return samples


def read_bench(path):
    """(mean, p50, p99, iters) in us from a benchmark output, or None."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    m = re.search(r"(\d+) iterations after", text)
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 10 and not line.startswith("#") and fields[0].isdigit():
            return (float(fields[4]), float(fields[8]), float(fields[9]),
                    int(m.group(1)) if m else None)
    return None


# share of samples with a frame in the call chain: where the work is done from
CHAIN_MARKS = (
    ("in ibv_post_send (rxe inline)", re.compile(r"^ib_uverbs_post_send$")),
    ("rxe_requester", re.compile(r"^rxe_requester$")),
    ("rxe_responder", re.compile(r"^rxe_responder$")),
    ("rxe_completer", re.compile(r"^rxe_completer$")),
    ("nanosleep", re.compile(r"nanosleep")),
    ("poll() / epoll", re.compile(r"^(do_sys_poll|ep_poll|do_epoll_wait)$")),
    ("futex wait", re.compile(r"^futex_wait")),
)


def comm_kind(comm):
    if comm.startswith(("shs-allreduce", "gloo-allreduce")):
        return "ranks"
    if comm.startswith("swapper"):
        return "idle task"
    if comm.startswith("ksoftirqd"):
        return "ksoftirqd"
    if comm.startswith("kworker") or comm.startswith("rxe"):
        return "kworker"
    if comm.startswith("perf") or comm == "sleep":
        return "perf"
    return "other"


COMM_KINDS = ("ranks", "ksoftirqd", "kworker", "idle task", "perf", "other")


def load(res):
    got = {"run": results_page.read_run(os.path.join(res, "run.txt")), "sizes": find_sizes(res),
           "guest": results_page.read_run(os.path.join(res, "guest.txt")), "runs": {}}
    for tool, _ in TOOLS:
        for size, _ in got["sizes"]:
            name = "%s.%s" % (tool, size)
            r = {"spread": read_bench(os.path.join(res, "spread.%s.txt" % name)),
                 "prof": read_bench(os.path.join(res, "prof.%s.txt" % name)),
                 "meta": results_page.read_run(os.path.join(res, "prof.%s.meta" % name)),
                 "hwc": [results_page.read_run(os.path.join(res, "spread.%s.hwc%d" % (name, k)))
                         for k in (0, 1)]}
            flat = Counter()
            syms = Counter()
            for n, dso, sym in read_report(os.path.join(res, "perf.%s.report.txt" % name)):
                flat[classify_flat(sym, dso)] += n
                syms[(dso, sym)] += n
            r["flat"], r["syms"] = flat, syms
            attr, comms, attr_ranks, marks = Counter(), Counter(), Counter(), Counter()
            for comm, frames in read_script(os.path.join(res, "perf.%s.script.gz" % name)):
                g = classify_chain(frames)
                for mark, rule in CHAIN_MARKS:
                    if any(rule.search(sym) for sym, _ in frames):
                        marks[mark] += 1
                attr[g] += 1
                comms[comm_kind(comm)] += 1
                if comm_kind(comm) == "ranks":
                    attr_ranks[g] += 1
            if not comms:  # no perf script: the process split from perf report
                for n, comm in read_comm(os.path.join(res, "perf.%s.comm.txt" % name)):
                    comms[comm_kind(comm)] += n
            r["attr"], r["comms"], r["attr_ranks"], r["marks"] = attr, comms, attr_ranks, marks
            got["runs"][name] = r
    return got


def enough(got):
    return any(r["spread"] or r["flat"] for r in got["runs"].values())


def label(size):
    return size.upper().replace("K", " KiB").replace("M", " MiB").replace("G", " GiB")


def pct(part, total):
    return "%.1f" % (100.0 * part / total) if total else "-"


def share_table(got, key, caption):
    lines = [caption, "",
             "| tool | size | samples | " + " | ".join(SHORT[g] for g, _ in GROUPS) + " |",
             "| --- | ---: | ---: | " + " | ".join("---:" for _ in GROUPS) + " |"]
    for size, _ in got["sizes"]:
        for tool, title in TOOLS:
            c = got["runs"]["%s.%s" % (tool, size)][key]
            tot = sum(c.values())
            if not tot:
                continue
            lines.append("| %s | %s | %d | %s |" % (title, label(size),
                                                   tot, " | ".join(pct(c[g], tot)
                                                                   for g, _ in GROUPS)))
    return lines


HWC = ("sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_seq_err",
       "completer_retry_err", "retry_exceeded_err", "send_rnr_err", "rcvd_rnr_err",
       "ack_deferred")


def hwc_table(got):
    """rxe's counters per call of the spread runs (set-up included, a few
    packets), against the data packets a ring must send."""
    run, guest = got["run"], got["guest"]
    n = int(run.get("ranks", "4"))
    calls_extra = 1 + int(run.get("warmup", "2"))  # the checked call and the warm-up
    try:
        mtu = int(guest.get("active_mtu", ""))
    except ValueError:
        mtu = None
    rows = []
    for size, nbytes in got["sizes"]:
        for tool, title in TOOLS:
            r = got["runs"]["%s.%s" % (tool, size)]
            h0, h1 = r["hwc"]
            if not h0 or not h1 or not r["spread"] or not r["spread"][3]:
                continue
            calls = r["spread"][3] + calls_extra

            def per_call(k):
                try:
                    return (int(h1[k]) - int(h0[k])) / calls
                except (KeyError, ValueError):
                    return None
            want = n * 2 * (n - 1) / n * nbytes / mtu if mtu else None
            sent = per_call("sent_pkts")
            cells = ["%.0f" % v if v is not None else "-" for v in (per_call(k) for k in HWC)]
            rows.append("| %s | %s | %s | %s | %s |" % (
                label(size), title, "%.0f" % want if want else "-",
                "%.2f" % (sent / want) if want and sent is not None else "-",
                " | ".join(cells)))
    if not rows:
        return []
    return ["", "rxe's counters (`hw_counters`, the one device all ranks share) per call of "
            "the spread runs; data packets = ranks x 2(N-1)/N x size / path MTU:", "",
            "| size | tool | data packets | sent / data | " + " | ".join(HWC) + " |",
            "| ---: | --- | ---: | ---: | " + " | ".join("---:" for _ in HWC) + " |"] + rows


def cpu_table(got):
    """CPU time per call (both vCPUs) by group: samples / frequency / the
    calls that fit in perf's window."""
    rows = []
    for size, _ in got["sizes"]:
        for tool, title in TOOLS:
            r = got["runs"]["%s.%s" % (tool, size)]
            c, meta, p = r["attr"], r["meta"], r["prof"]
            try:
                freq, secs = float(meta["freq"]), float(meta["seconds"])
            except (KeyError, ValueError):
                continue
            if not c or not p:
                continue
            calls = secs / (p[0] / 1e6)
            busy = sum(v for g, v in c.items() if g != "idle")
            rows.append("| %s | %s | %.0f | %.0f | %s |" % (
                label(size), title, p[0] / 1e3, busy / freq / calls * 1e3,
                " | ".join("%.0f" % (c[g] / freq / calls * 1e3) for g, _ in GROUPS)))
    if not rows:
        return []
    return ["", "CPU time per call under perf (ms, both vCPUs; attributed groups; "
            "= samples / frequency / calls in the window):", "",
            "| size | tool | call (ms) | busy CPU | " + " | ".join(SHORT[g] for g, _ in GROUPS)
            + " |",
            "| ---: | --- | ---: | ---: | " + " | ".join("---:" for _ in GROUPS) + " |"] + rows


def body(got, command):
    run = got["run"]
    guest = got["guest"]
    lines = [results_page.headline(
        run, command,
        "%s ranks in one guest (guest MTU %s, rxe active_mtu %s, kernel %s), float sum; "
        "ours: shs-allreduce-bench, zero-copy region%s; Gloo: gloo-allreduce-bench "
        "(ibverbs AllreduceRingChunked)" % (
            run.get("ranks", "4"), run.get("mtu", "1500"), guest.get("active_mtu", "?"),
            guest.get("kernel", "?"),
            ", with " + run["envs"] if run.get("envs") else "")), ""]
    if run.get("raw"):
        lines += ["Raw outputs (perf report, perf script, perf.data): `%s`." % run["raw"], ""]

    # per-call spread
    lines += ["Per-call time without perf (%s calls, each averaged over the ranks; p99 is "
              "the max below 100 calls):" % run.get("iters", "?"), "",
              "| size | tool | mean (us) | p50 (us) | p99 (us) | p99 / p50 | mean / p50 "
              "| busbw p50 (MB/s) | Gloo p50 / ours p50 |",
              "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    n = int(run.get("ranks", "4"))
    for size, nbytes in got["sizes"]:
        ours = got["runs"]["ours.%s" % size]["spread"]
        gloo = got["runs"]["gloo.%s" % size]["spread"]
        for tool, title in TOOLS:
            s = got["runs"]["%s.%s" % (tool, size)]["spread"]
            if not s:
                lines.append("| %s | %s | fail | | | | | | |" % (label(size), title))
                continue
            mean, p50, p99, _ = s
            ratio = "%.2f" % (gloo[1] / ours[1]) if tool == "ours" and ours and gloo else ""
            lines.append("| %s | %s | %.0f | %.0f | %.0f | %.2f | %.3f | %.1f | %s |" % (
                label(size), title, mean, p50, p99, p99 / p50, mean / p50,
                nbytes / p50 * 2 * (n - 1) / n, ratio))

    # the profile windows
    lines += ["", "Profile runs: `perf record -a -g -F %s` for %s s of the timed loop "
              "(set-up excluded), both vCPUs:" % (
                  next((r["meta"].get("freq") for r in got["runs"].values() if r["meta"]), "?"),
                  next((r["meta"].get("seconds") for r in got["runs"].values() if r["meta"]),
                       "?")), "",
              "| size | tool | calls in the run | mean call under perf (us) | p50 (us) | "
              "p99 (us) | p99 / p50 | window inside the loop | set-up before it (s) |",
              "| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for size, _ in got["sizes"]:
        for tool, title in TOOLS:
            r = got["runs"]["%s.%s" % (tool, size)]
            if not r["meta"]:
                continue
            p = r["prof"]
            lines.append("| %s | %s | %s | %s | %s | %s |" % (
                label(size), title, r["meta"].get("profile_iters", "?"),
                "%.0f | %.0f | %.0f | %.2f" % (p[0], p[1], p[2], p[2] / p[1]) if p
                else "fail | | |", r["meta"].get("window_inside_loop", "?"),
                r["meta"].get("setup_s", "?")))

    lines += hwc_table(got)
    lines += cpu_table(got)

    legend = ", ".join("%s = %s" % (SHORT[g], t) for g, t in GROUPS)
    lines += [""] + share_table(
        got, "attr", "Share of all samples (%), both vCPUs, attributed: each sample to the "
        "first frame of its call chain that has a group, after skipping the points where "
        "interrupts come back on (under TCG the time of an irq-off section is sampled "
        "there). " + legend + ".")
    lines += [""] + share_table(
        got, "flat", "The same by the sampled symbol alone (`perf report --no-children "
        "--sort dso,sym`), so irq-off time stays on `_raw_spin_unlock_irqrestore` "
        "(k other):")
    lines += [""] + share_table(
        got, "attr_ranks", "Only the samples of the rank processes (their user code and "
                           "the kernel work done in their context), attributed:")

    lines += ["", "Samples by process (%):", "",
              "| size | tool | " + " | ".join(COMM_KINDS) + " |",
              "| ---: | --- | " + " | ".join("---:" for _ in COMM_KINDS) + " |"]
    for size, _ in got["sizes"]:
        for tool, title in TOOLS:
            c = got["runs"]["%s.%s" % (tool, size)]["comms"]
            tot = sum(c.values())
            if tot:
                lines.append("| %s | %s | %s |" % (label(size), title,
                                                   " | ".join(pct(c[k], tot)
                                                              for k in COMM_KINDS)))

    lines += ["", "Samples with a frame in their call chain (%; one sample can count in "
              "several columns):", "",
              "| size | tool | " + " | ".join(m for m, _ in CHAIN_MARKS) + " |",
              "| ---: | --- | " + " | ".join("---:" for _ in CHAIN_MARKS) + " |"]
    for size, _ in got["sizes"]:
        for tool, title in TOOLS:
            r = got["runs"]["%s.%s" % (tool, size)]
            tot = sum(r["attr"].values())
            if tot:
                lines.append("| %s | %s | %s |" % (label(size), title, " | ".join(
                    pct(r["marks"][m], tot) for m, _ in CHAIN_MARKS)))

    lines += ["", "Top symbols (flat, % of all samples):", ""]
    for size, _ in got["sizes"]:
        for tool, title in TOOLS:
            r = got["runs"]["%s.%s" % (tool, size)]
            tot = sum(r["syms"].values())
            if not tot:
                continue
            top = ", ".join("`%s` %s" % (sym if len(sym) < 60 else sym[:57] + "...",
                                         pct(v, tot))
                            for (_dso, sym), v in r["syms"].most_common(10))
            lines.append("- %s %s: %s" % (title, label(size), top))
    lines += ["", "The benchmarks print no library counters (idle_polls, chunks_sent: "
              "shs_coll_get_stats); the polling share above stands for them."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="shs_report.profile")
    ap.add_argument("res")
    ap.add_argument("--page", default=results_page.page_path("allreduce-profile.md"))
    ap.add_argument("--no-page", action="store_true")
    a = ap.parse_args(argv)
    got = load(a.res)
    if not enough(got):
        print("allreduce-profile: nothing to report in %s" % a.res, file=sys.stderr)
        return 1
    run = got["run"]
    text = body(got, run.get("command") or "tools/allreduce-profile")
    print(text)
    if not a.no_page:
        results_page.try_write_block(a.page, "allreduce-profile-mtu%s" % run.get("mtu", "1500"),
                                     text, "tools/allreduce-profile",
                                     title="Allreduce: where the time goes (perf, Soft-RoCE)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
