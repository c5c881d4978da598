"""Write one generated block of a page in docs/results/.

A results page holds hand-written prose around blocks that a benchmark
script writes:

    <!-- NAME:begin (tools/SCRIPT writes this block) -->
    ...
    <!-- NAME:end -->

write_block() replaces the block NAME of a page (or appends it, or creates
the page), leaving the rest of the page alone. machine() describes the
machine a figure was measured on, for the block's first line.
Python 3 standard library only.
"""
import datetime
import os
import platform
import re

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))  # tools/shs_report -> the source tree
RESULTS = os.path.join(SRC, "docs", "results")


def page_path(name):
    """docs/results/<name> in this source tree."""
    return os.path.join(RESULTS, name)


def today():
    return datetime.date.today().isoformat()


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def machine(guest=True):
    """'host NAME (N CPUs, MODEL), QEMU guests ...' or the like."""
    text = "host %s (%d CPUs, %s)" % (platform.node(), os.cpu_count() or 0, cpu_model())
    if guest:
        # tools/shs-vm picks KVM when /dev/kvm boots a probe kernel, else TCG
        accel = os.environ.get("SHS_VM_ACCEL", "auto")
        text += ", QEMU guests with Soft-RoCE (tools/shs-vm, accel %s)" % accel
    return text


def _markers(name, script):
    return ("<!-- %s:begin (%s writes this block) -->" % (name, script),
            "<!-- %s:end -->" % name)


def write_block(path, name, body, script, title=None):
    """Put body (markdown) between the markers of block `name` in page path."""
    begin, end = _markers(name, script)
    block = "%s\n%s\n%s\n" % (begin, body.rstrip("\n"), end)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        text = "# %s\n\n" % (title or name)
    pat = re.compile(r"<!-- %s:begin[^\n]*-->\n.*?<!-- %s:end -->\n" %
                     (re.escape(name), re.escape(name)), re.S)
    if pat.search(text):
        text = pat.sub(lambda _m: block, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + block
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def read_run(path):
    """The key=value lines a script left beside its raw results (date,
    where: guest or host, command), or {} when there are none."""
    run = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.rstrip("\n").partition("=")
                if sep:
                    run[key] = value
    except FileNotFoundError:
        pass
    return run


def headline(run, default_command, what):
    """'Measured DATE on MACHINE, WHAT. Command: `CMD`.' for a run record."""
    return "Measured %s on %s, %s. Command: `%s`." % (
        run.get("date") or today(), machine(guest=run.get("where") == "guest"), what,
        run.get("command") or default_command)


def try_write_block(path, name, body, script, title=None):
    """write_block, or a hint when the page cannot be written (a guest sees
    the source tree read-only)."""
    try:
        write_block(path, name, body, script, title)
        print("%s: wrote block %s of %s" % (os.path.basename(script), name, path))
        return True
    except OSError as e:
        print("%s: could not write %s (%s); on the host: %s --report --out DIR"
              % (os.path.basename(script), path, e.strerror, script))
        return False


def block_main(argv, prog, page, block, script, title, load, body, enough):
    """The main of a report that turns one OUT directory into one block:
    `prog OUT [--command C] [--page P | --no-page]`. load(out) reads the
    results, enough(results) says whether there is something to report,
    body(results, command) is the block's markdown (command None: the one
    the results recorded)."""
    import argparse
    import sys
    ap = argparse.ArgumentParser(prog=prog)
    ap.add_argument("out")
    ap.add_argument("--command")
    ap.add_argument("--page", default=page_path(page))
    ap.add_argument("--no-page", action="store_true")
    a = ap.parse_args(argv)
    got = load(a.out)
    if not enough(got):
        print("%s: nothing to report in %s" % (prog, a.out), file=sys.stderr)
        return 1
    text = body(got, a.command)
    print(text)
    if not a.no_page:
        try_write_block(a.page, block, text, script, title=title)
    return 0
