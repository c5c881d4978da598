#!/usr/bin/env bash
# rdma.mpirun.*: 4 ranks started by Open MPI's mpirun instead of shs-launch.
# Nothing sets SHS_RANK or SHS_SIZE: the library takes them from
# OMPI_COMM_WORLD_RANK/SIZE and its job token from Open MPI's job id
# (runtime/config.c); the programs take rank and size from the context.
#
#   mpirun.sh allreduce SHS_ALLREDUCE_BENCH   ring allreduce with the check
#                                             on: 0 wrong elements
#   mpirun.sh ctr SHS_CTR                     a short S-MA run of the
#                                             trainer: every rank r/4 trains
#                                             and evaluates, rank 0 sees 4
#
# Open MPI settings, and why: --allow-run-as-root (the guest runs as root);
# --oversubscribe (4 ranks on the guest's 2 CPUs); --bind-to none (ranks and
# their shadow threads share the CPUs as under shs-launch); the out-of-band
# channel of its runtime on loopback only (the guest's veth pair carries the
# RDMA link); neither program calls MPI_Init, so no BTL or PML is involved.
# SHS_BOOTSTRAP names a free port so that a stale rendezvous cannot collide.
# Exit: 0 pass, 1 fail, 77 no RDMA device or no mpirun (CTest "Not Run").
set -euo pipefail
what=${1:?usage: mpirun.sh allreduce|ctr PROGRAM}
prog=${2:?usage: mpirun.sh allreduce|ctr PROGRAM}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
N=4

if [ ! -d /sys/class/infiniband ] || [ -z "$(ls -A /sys/class/infiniband)" ]; then
    echo "no RDMA device: skipped"
    exit 77
fi
if ! command -v mpirun > /dev/null; then
    echo "no mpirun (tools/install-deps.sh installs openmpi-bin): skipped"
    exit 77
fi
port=$("$here/../../tools/shs-report" free-port tcp)
MPIRUN=(timeout 240 mpirun --allow-run-as-root --oversubscribe --bind-to none
        --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo
        -x SHS_BOOTSTRAP="127.0.0.1:$port" -np "$N")

case $what in
allreduce) cmd=("$prog" -b 4k -e 1m -f 4 -n 5 -w 1 -c 1) ;;
ctr) cmd=("$prog" --mode s-ma --examples 20000 --eval 2000 --workers 1 --params 20000
          --checkpoints 1) ;;
*) echo "mpirun.sh: unknown test $what" >&2; exit 2 ;;
esac

echo "+ ${MPIRUN[*]} ${cmd[*]}"
rc=0
out=$("${MPIRUN[@]}" "${cmd[@]}" 2>&1) || rc=$?
echo "$out"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
[ "$rc" = 0 ] || bad "mpirun exited with $rc"
case $what in
allreduce)
    grep -q "^# shs-allreduce-bench: $N ranks" <<< "$out" || bad "rank 0 does not see $N ranks"
    grep -qx "# wrong elements: 0" <<< "$out" || bad "the check did not report 0 wrong elements"
    rows=$(grep -cE '^ +[0-9]+ ' <<< "$out" || true)
    [ "$rows" -ge 1 ] || bad "no result rows"
    ;;
ctr)
    grep -q "s-ma  *$N rank(s)" <<< "$out" || bad "rank 0 does not see $N ranks"
    for ((r = 0; r < N; r++)); do
        grep -qE "rank $r/$N: [0-9]+ examples in .* eval NE [0-9.]+" <<< "$out" \
            || bad "rank $r/$N did not train and evaluate"
    done
    grep -q "averaged final model: eval NE" <<< "$out" || bad "no job-wide end of the run"
    ;;
esac
if [ "$fail" = 0 ]; then echo "PASS mpirun $what ($N ranks)"; fi
exit "$fail"
