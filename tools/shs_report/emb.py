"""The report of tools/emb-compare: sharded embedding lookups against Redis
MGET and the device's READ message rate, then the updates (update rows/s
and what they cost the holders), from the raw outputs of one guest run, as
markdown tables (printed, and written into the block emb-compare of
docs/results/embedding.md).

    tools/shs-report emb-compare RESULTS_DIR --command CMD [--page FILE | --no-page]

RESULTS_DIR holds ours.read.json and ours.owner.json (shs-emb-bench --json
lines), redis.<round>.<dim>.<batch>.<dist>.json (one line per client
process), readbw.<round>.<dim>.txt (ib_read_bw), and for the update phase
ours.update.json and ours.mixed.json. Every figure is the median over
rounds; ratios are of those medians. A phase that did not run leaves its
table out. With --peer-build the lookup phase ran this build against
another one instead (peer.read.json, peer.owner.json): that table goes in
the block emb-peer.
"""
import argparse
import glob
import json
import os
import re
import statistics

from . import results_page


def median(xs):
    return statistics.median(xs) if xs else None


def load_ours(res, path, name="ours"):
    """{(dist, dim, batch): [record, ...]} of shs-emb-bench's JSON lines."""
    out = {}
    try:
        with open(os.path.join(res, "%s.%s.json" % (name, path)), encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    r = json.loads(line)
                    out.setdefault((r["dist"], r["dim"], r["batch"]), []).append(r)
    except FileNotFoundError:
        pass
    return out


def load_redis(res):
    """{(dist, dim, batch): [ids/s summed over the clients of one round]}"""
    out = {}
    pat = re.compile(r"redis\.(\d+)\.(\d+)\.(\d+)\.(\w+)\.json$")
    for p in sorted(glob.glob(os.path.join(res, "redis.*.json"))):
        m = pat.search(p)
        if not m:
            continue
        with open(p, encoding="utf-8") as f:
            recs = [json.loads(x) for x in f if x.strip().startswith("{")]
        if len(recs) == 4:  # a round counts only when every client finished
            key = (m.group(4), int(m.group(2)), int(m.group(3)))
            out.setdefault(key, []).append(sum(r["ids_per_s"] for r in recs))
    return out


def parse_readbw(text, size):
    """ib_read_bw's message rate (messages/s) for `size` bytes, or None."""
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 5 and f[0] == str(size):
            try:
                return float(f[4]) * 1e6
            except ValueError:
                return None
    return None


def load_readbw(res):
    """{dim: [messages/s per round]}"""
    out = {}
    for p in sorted(glob.glob(os.path.join(res, "readbw.*.txt"))):
        dim = int(p.rsplit(".", 2)[1])
        with open(p, encoding="utf-8", errors="replace") as f:
            rate = parse_readbw(f.read(), dim * 4)
        if rate is not None:
            out.setdefault(dim, []).append(rate)
    return out


def fmt(x, spec="%.4g"):
    return "-" if x is None else spec % x


def ratio(a, b):
    return None if a is None or not b else a / b


def update_table(res):
    """The update phase's table (shs-emb-bench --mode update and mixed), or
    None when it did not run."""
    rows = ["| mode | dim | batch | update rows/s | stall % | apply busy % | apply lag max |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for mode in ("update", "mixed"):
        runs = load_ours(res, mode)
        for k in sorted(runs):
            med = [median([x[f] for x in runs[k] if f in x]) for f in
                   ("update_rows_per_s", "stall_pct", "apply_busy_pct", "apply_lag_max")]
            rows.append("| %s | %d | %d | %s | %s | %s | %s |" % (
                mode, k[1], k[2], fmt(med[0]), fmt(med[1], "%.2f"), fmt(med[2], "%.1f"),
                fmt(med[3], "%.0f")))
    if len(rows) == 2:
        return None
    return ("Updates, uniform ids: update rows/s are distinct rows sent, all ranks; stall % "
            "is the share of worker time spent waiting for a holder's free inbox slot; "
            "apply busy % is the holders' apply thread busy time over the run, mean over "
            "holders; apply lag max is the most update messages an apply thread found "
            "waiting at once, max over ranks.\n\n" + "\n".join(rows))


def table(res):
    read, owner, redis, rbw = (load_ours(res, "read"), load_ours(res, "owner"),
                               load_redis(res), load_readbw(res))
    keys = sorted(set(read) | set(owner) | set(redis))
    rows = ["| ids | dim | batch | READ path ids/s | owner path ids/s | Redis MGET ids/s "
            "| best / Redis | READs/s | ib_read_bw msgs/s | READs / ib_read_bw | remote % |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for k in keys:
        r_ids = median([x["ids_per_s"] for x in read.get(k, [])])
        o_ids = median([x["ids_per_s"] for x in owner.get(k, [])])
        red = median(redis.get(k, []))
        best = max([x for x in (r_ids, o_ids) if x is not None], default=None)
        reads = median([x.get("reads_per_s", 0.0) for x in read.get(k, [])])
        dev = median(rbw.get(k[1], []))
        remote = median([x["remote_pct"] for x in read.get(k, [])])
        rows.append("| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            k[0], k[1], k[2], fmt(r_ids), fmt(o_ids), fmt(red), fmt(ratio(best, red), "%.2f"),
            fmt(reads), fmt(dev), fmt(ratio(reads, dev), "%.2f"), fmt(remote, "%.0f")))
    recs = [x for v in read.values() for x in v if x.get("table_bytes")]
    mem = None
    if recs:
        big = max(recs, key=lambda x: (x["table_bytes"], x["batch"]))
        mem = ("Memory per rank for the largest table (%d rows x %d float32 = %.1f MB, a "
               "quarter of it per holder: %.1f MB): registered %.1f MB (shard, inboxes and "
               "the batch %d buffers), resident %.1f MB." % (
                   big["rows"], big["dim"], big["table_bytes"] / 1e6,
                   big["table_bytes"] / 4e6, big.get("registered_bytes_per_rank", 0) / 1e6,
                   big["batch"], big.get("rss_bytes_per_rank", 0) / 1e6))
    return "\n".join(rows), mem


def peer_table(res):
    """This build's lookup rate over the peer build's, per path, or None."""
    got = {p: (load_ours(res, p), load_ours(res, p, "peer")) for p in ("read", "owner")}
    keys = sorted(set(k for a, b in got.values() for k in set(a) & set(b)))
    if not keys:
        return None
    rows = ["| ids | dim | batch | READ path ids/s | peer READ ids/s | ratio "
            "| owner path ids/s | peer owner ids/s | ratio | rounds |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    ratios = []
    for k in keys:
        cells, n = [], 0
        for p in ("read", "owner"):
            a = median([x["ids_per_s"] for x in got[p][0].get(k, [])])
            b = median([x["ids_per_s"] for x in got[p][1].get(k, [])])
            n = max(n, min(len(got[p][0].get(k, [])), len(got[p][1].get(k, []))))
            if a is not None and b:
                ratios.append(a / b)
            cells += [fmt(a), fmt(b), fmt(ratio(a, b), "%.3f")]
        rows.append("| %s | %d | %d | %s | %d |" % (k[0], k[1], k[2], " | ".join(cells), n))
    text = "\n".join(rows)
    if ratios:
        text += ("\n\nThis build over the peer: median ratio %.3f, lowest %.3f, highest %.3f "
                 "(%d configurations x paths; each figure the median over rounds, the two "
                 "builds run one after the other in alternating order)." % (
                     statistics.median(ratios), min(ratios), max(ratios), len(ratios)))
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results")
    ap.add_argument("--command", default="tools/emb-compare")
    ap.add_argument("--page", default=results_page.page_path("embedding.md"))
    ap.add_argument("--no-page", action="store_true")
    a = ap.parse_args(argv)
    peer = peer_table(a.results)
    if peer is not None:
        head = results_page.headline({"where": "guest"}, a.command,
                                     "4 ranks in one guest, median of rounds")
        text = head + "\n\n" + peer
        print(text)
        if not a.no_page:
            results_page.try_write_block(a.page, "emb-peer", text, "tools/emb-compare",
                                         "Embedding tables: lookups against Redis and the "
                                         "device")
        return 0
    body, mem = table(a.results)
    upd = update_table(a.results)
    parts = [body] + ([mem] if mem else [])
    if upd is not None and not (load_ours(a.results, "read") or load_ours(a.results, "owner")):
        parts = []  # only the update phase ran
    fails = os.path.join(a.results, "failures.txt")
    notes = []
    if os.path.exists(fails):
        with open(fails, encoding="utf-8") as f:
            notes = ["Failed runs (left out): " + "; ".join(x.strip() for x in f if x.strip())]
    head = results_page.headline({"where": "guest"}, a.command,
                                 "4 ranks in one guest, median of rounds")
    text = "\n\n".join([head] + parts + ([upd] if upd else []) + notes)
    print(text)
    if not a.no_page:
        results_page.try_write_block(a.page, "emb-compare", text, "tools/emb-compare",
                                     "Embedding tables: lookups against Redis and the device")
    return 0

