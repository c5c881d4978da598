"""The closing summary of tools/run-tests, from CTest's JUnit files: a test
that did not run is a failure, and so is a group with no tests."""
import os
import xml.etree.ElementTree as ET


def count(path):
    """{"passed", "failed", "not run"} -> test names, from one JUnit file."""
    names = {"passed": [], "failed": [], "not run": []}
    for tc in ET.parse(path).getroot().iter("testcase"):
        st = tc.get("status", "")
        k = "passed" if st == "run" else "failed" if st == "fail" else "not run"
        names[k].append(tc.get("name"))
    return names


def group_line(g, names):
    """(the summary line of group g, whether the group failed)."""
    total = sum(len(v) for v in names.values())
    line = f"  {g:9s}: {len(names['passed'])}/{total} passed"
    if names["failed"]:
        line += f", {len(names['failed'])} FAILED: " + " ".join(names["failed"])
    if names["not run"]:
        line += f", {len(names['not run'])} NOT RUN: " + " ".join(names["not run"])
    if total == 0:
        line += " (no tests: that is a failure)"
    return line, bool(names["failed"] or names["not run"] or total == 0)


def main(argv):
    """test-summary DIR SECONDS GROUP...: exit 1 unless every group passed."""
    d, secs, groups = argv[0], argv[1], argv[2:]
    bad = False
    print("== summary")
    for g in groups:
        f = os.path.join(d, g + ".xml")
        if not os.path.exists(f):
            print(f"  {g:9s}: no results (the run did not finish)")
            bad = True
            continue
        line, failed = group_line(g, count(f))
        print(line)
        bad = bad or failed
    if not groups:
        print("  no group ran")
        bad = True
    print(f"  time     : {secs} s")
    print("  result   : " + ("FAIL" if bad else "PASS"))
    return 1 if bad else 0
