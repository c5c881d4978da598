#!/usr/bin/env bash
# Boots a guest whose module list lacks crc32_generic and checks that shs-vm
# exits 125 within the timeout and names the failing step ("rdma link add").
set -euo pipefail
shs_vm=$1
rc=0
out=$(SHS_VM_MODULES="virtio_pci virtio_net 9pnet_virtio 9p overlay veth configfs rdma_rxe rdma_ucm" \
      "$shs_vm" --quiet --timeout 150 -- true 2>&1) || rc=$?
echo "$out" | tail -n 3
if [ "$rc" -ne 125 ]; then
    echo "FAIL: expected exit 125 from a broken guest, got $rc"
    exit 1
fi
if ! echo "$out" | grep -q "set-up step failed: rdma link add"; then
    echo "FAIL: the failing step is not named"
    exit 1
fi
echo "ok: broken guest reported as step 'rdma link add' with exit 125"
