#!/usr/bin/env bash
# One rank of a two-guest fault test (tests/vm/fault-2vm.sh runs it in both
# guests through tools/shs-vm -n 2). Rank = guest index; rank 0 (guest 0) is
# the bootstrap and stays healthy; rank 1 (guest 1) causes the fault when 20%
# of its pass is done:
#   poweroff  guest 1 powers off at once (sysrq 'o': no shutdown, no FIN)
#   linkcut   guest 1 takes its RDMA netdev down for 12 s, then up again
# Usage: fault-guest.sh SHS_CTR_FAULT MODE
set -euo pipefail
ctr=$1 mode=$2
first=${SHS_VM_PEERS%% *}
dev=$(ip -o -4 addr show | awk -v a="$SHS_VM_ADDR" 'index($4, a "/") == 1 {print $2; exit}')
export SHS_BOOTSTRAP="$first:18631" SHS_SIZE=2 SHS_RANK="$SHS_VM_INDEX"
export SHS_JOB_TOKEN=fault-2vm-test SHS_CONNECT=oob
# the bootstrap barrier after a silent host loss waits this long at most
export SHS_BOOTSTRAP_TIMEOUT_MS=${SHS_BOOTSTRAP_TIMEOUT_MS:-30000}
# rxe takes SHS_QP_RETRY 7 as "retry forever": an unreachable peer is failed
# by the first wait that sees no completion for SHS_OP_TIMEOUT_MS (5 s here)
export SHS_OP_TIMEOUT_MS=${SHS_OP_TIMEOUT_MS:-5000}
case $mode in
  poweroff) cmd='echo 1 > /proc/sys/kernel/sysrq; echo o > /proc/sysrq-trigger' ;;
  linkcut)  cmd="(ip link set dev $dev down; sleep 12; ip link set dev $dev up) &" ;;
  *) echo "fault-guest.sh: unknown mode $mode"; exit 2 ;;
esac
set -- --mode s-ma --workers 1 --params 20000 --examples 200000 --eval 2000 --checkpoints 2
echo "fault-guest: rank $SHS_RANK on $dev ($SHS_VM_ADDR), mode $mode, SHS_OP_TIMEOUT_MS=$SHS_OP_TIMEOUT_MS"
rc=0
if [ "$SHS_VM_INDEX" = 1 ]; then
  "$ctr" "$@" --kill-rank 1 --kill-at 0.2 --fault-cmd "$cmd" --hold 60 2>&1 || rc=$?
else
  "$ctr" "$@" --hold 60 2>&1 || rc=$?
fi
echo "FAULT_RANK_RC=$SHS_RANK:$rc"
exit $rc
