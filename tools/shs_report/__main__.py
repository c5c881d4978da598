"""tools/shs-report COMMAND ARGS...

    ctr DIR [--svg F] [--order L,L] [--markdown] [--page P --block B --command C]
                                                   table and picture of shs-ctr runs
    ctr-seeds DIR... [--page P --block B --command C]
                                                   modes over seeds: mean, spread, claims
    finish-page OUT --seeds S --examples T --command C --page P
                                                   docs/results/s-ma-finish.md
    fr-every DIR LABEL       FR interval matching the S run LABEL (ctr-run)
    tradeoff DIR [--page P | --no-page]      medians of tools/ctr-tradeoff
    fault-figures DIR [--page P | --no-page] the two runs of tools/fault-figures
    stall-figures DIR [--page P | --no-page] the runs of tools/stall-figures
    restart-figures DIR [--page P | --no-page]  the runs of tools/restart-figures
    rdma-sample FILE         queue pairs and regions per process, twice a second
    allreduce-compare RESULTS --mtu N --command C [--page P | --no-page]
                                             the report of tools/allreduce-compare
    emb-compare RESULTS --command C [--page P | --no-page]
                                             the report of tools/emb-compare
    python-overhead OUT --command C [--page P | --no-page]
                                             the runs of tools/python-overhead
    pytorch OUT --command C [--page P | --no-page]
                                             the runs of tools/pytorch-compare
    test-summary DIR SECONDS GROUP...   the closing summary of tools/run-tests
    free-port tcp|udp        a free port on 127.0.0.1
"""
import sys

from . import (allreduce, ctr, emb, faults, finish, free_port, pyoverhead, pytorch, restarts,
               seeds, stalls, summary, sweeps, tradeoff)

COMMANDS = {
    "ctr": ctr.main,
    "ctr-seeds": seeds.main,
    "finish-page": finish.main,
    "fr-every": sweeps.main_fr_every,
    "tradeoff": tradeoff.main,
    "fault-figures": faults.main,
    "stall-figures": stalls.main,
    "restart-figures": restarts.main,
    "rdma-sample": restarts.sample_main,
    "emb-compare": emb.main,
    "allreduce-compare": allreduce.main,
    "python-overhead": pyoverhead.main,
    "pytorch": pytorch.main,
    "test-summary": summary.main,
    "free-port": lambda argv: print(free_port(argv[0] if argv else "tcp")) or 0,
}


def main(argv):
    if not argv or argv[0] not in COMMANDS:
        print(__doc__, file=sys.stderr if argv[:1] not in (["-h"], ["--help"]) else sys.stdout)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    return COMMANDS[argv[0]](argv[1:])


sys.exit(main(sys.argv[1:]))
