#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# PID 1 of the guest booted by run-vm.sh, on the host's root mounted read-only over 9p:
# mounts what a program needs, makes soft-RoCE device rxe0 on a dummy interface (unless
# BRAID_VM_NO_RXE is set in the command's environment file), runs the command the harness
# left in the shared work directory, reports its status on the console, and powers off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=dumb
bb=/usr/bin/busybox
finish() {
    echo "BRAID_VM_RC=$1" > /dev/console
    sync
    $bb poweroff -f
}
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm 2> /dev/null
mount -t devpts devpts /dev/pts 2> /dev/null
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /var/tmp
mount -t tmpfs tmpfs /mnt
mkdir -p /mnt/work /mnt/out
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 vmwork /mnt/work || finish 1
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 vmout /mnt/out || finish 1
# The project and the command's directories at their host paths (run-vm.sh lists them):
# the tmpfs mounts above may hide them.
while read -r tag path; do
    mkdir -p "$path" 2> /dev/null
    mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose "$tag" "$path" ||
        { echo "braid-vm: sharing $path failed"; finish 1; }
done < /mnt/work/shares
exec > /dev/console 2>&1
ip link set lo up
hostname braid-vm 2> /dev/null
ip link add d0 type dummy mtu 9000 && ip addr add 10.77.0.1/24 dev d0 && ip link set d0 up || finish 1
modprobe ib_uverbs && modprobe rdma_rxe || { echo "braid-vm: loading rdma_rxe failed"; finish 1; }
rdma link add rxe0 type rxe netdev d0 || { echo "braid-vm: rdma link add failed"; finish 1; }
export BRAID_VM=1 BRAID_VM_OUT=/mnt/out
echo "braid-vm: up in $(cut -d' ' -f1 /proc/uptime)s; $(rdma link show | tr '\n' ' ')"
{ sh /mnt/work/cmd.sh; echo $? > /tmp/braid-vm-rc; } 2>&1 | tee /mnt/out/cmd.log
finish "$(cat /tmp/braid-vm-rc 2> /dev/null || echo 1)"
