"""What the Python guest tests share: their arguments and the device check."""
import os
import sys


def launcher_and_program(doc):
    """(shs-launch, program) from the command line; exits 2 with the usage
    when they are missing, 77 (skipped) when this machine has no RDMA device."""
    if len(sys.argv) != 3:
        print(doc)
        sys.exit(2)
    return launcher_program_args(doc)[:2]


def launcher_program_args(doc):
    """(shs-launch, program, the rest of the arguments), as above."""
    if len(sys.argv) < 3:
        print(doc)
        sys.exit(2)
    if not os.path.isdir("/sys/class/infiniband") or not os.listdir("/sys/class/infiniband"):
        print("no RDMA device: skipped")
        sys.exit(77)
    return sys.argv[1], sys.argv[2], sys.argv[3:]
