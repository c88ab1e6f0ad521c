#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Boot Debian's kernel in QEMU with this machine's file system as the guest's root
# (virtio-9p, read-only), load soft-RoCE (rdma_rxe) and make one rxe device on a dummy
# interface, run one command inside, and exit with its status.
#
#   run-vm.sh [--timeout SECONDS] [--out DIR] [--mem MIB] [--smp N] -- COMMAND [ARGS...]
#
# The guest has no network device that leaves it (-nic none): its only interfaces are lo
# and the dummy d0 (10.77.0.1/24) it makes itself, which carries rxe0. COMMAND runs as
# root in the guest with the working directory it was started from here, BRAID_VM=1 and
# BRAID_VM_OUT set to DIR (a writable share: the only place where the guest's writes come
# back; a temporary directory, removed on exit, unless --out is given).
#
# Exit status: COMMAND's; 124 when the guest did not finish within the timeout (QEMU is
# killed); 77 (skipped, with the reason on stderr) when QEMU, a kernel with rdma_rxe, or
# busybox (for the initramfs) is missing; 1 when the guest failed before COMMAND ran.
# Environment: BRAID_VM_KERNEL (a vmlinuz path), BRAID_VM_ACCEL (tcg by default: a nested
# KVM guest hung at kernel start on the machines this was written on; kvm to try it),
# BRAID_VM_VERBOSE=1 (copy the guest console to stderr as it runs).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
timeout_s=300
out=""
mem=3072
smp=2
while [ $# -gt 0 ]; do
    case "$1" in
    --timeout) timeout_s=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --mem) mem=$2; shift 2 ;;
    --smp) smp=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "run-vm: unknown option $1" >&2; exit 2 ;;
    esac
done
if [ $# -eq 0 ]; then
    echo "usage: run-vm.sh [--timeout S] [--out DIR] [--mem MIB] [--smp N] -- COMMAND..." >&2
    exit 2
fi

skip() {
    echo "run-vm: SKIP: $*" >&2
    exit 77
}

qemu=$(command -v qemu-system-x86_64 || true)
[ -n "$qemu" ] || skip "qemu-system-x86_64 not found (apt-get install qemu-system-x86)"
bb=$(command -v busybox || true)
[ -n "$bb" ] || skip "busybox not found (apt-get install busybox)"

# The kernel: the newest /boot/vmlinuz-* whose modules include rdma_rxe.
kernel=${BRAID_VM_KERNEL:-}
if [ -z "$kernel" ]; then
    for k in $(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -V -r); do
        v=${k#/boot/vmlinuz-}
        if [ -n "$(find "/lib/modules/$v/kernel/drivers/infiniband/sw/rxe" -name 'rdma_rxe.ko*' 2>/dev/null)" ]; then
            kernel=$k
            break
        fi
    done
fi
[ -n "$kernel" ] || skip "no /boot/vmlinuz-* with rdma_rxe in /lib/modules (apt-get install linux-image-amd64)"
[ -r "$kernel" ] || skip "kernel $kernel is not readable"
kver=${kernel##*/vmlinuz-}
moddir=/lib/modules/$kver
[ -d "$moddir" ] || skip "no $moddir for kernel $kernel"

work=$(mktemp -d /tmp/braid-vm.XXXXXX)
qpid=""
cleanup() {
    if [ -n "$qpid" ] && kill -0 "$qpid" 2>/dev/null; then
        kill -9 "$qpid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
if [ -z "$out" ]; then
    out=$work/out
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

# The initramfs: busybox with the libraries it links, the modules a 9p root needs, and
# /init, which mounts the host's root and switches to it (guest-init.sh runs there).
ird=$work/initramfs
mkdir -p "$ird"/{bin,dev,proc,sys,newroot,mod,lib64,lib/x86_64-linux-gnu}
cp "$bb" "$ird/bin/busybox"
for lib in $(ldd "$bb" | grep -o '/[^ ]*'); do
    cp -L "$lib" "$ird$lib"
done
mods="virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci netfs fscache
      9pnet 9pnet_virtio 9p"
for m in $mods; do
    f=$(find "$moddir/kernel" -name "$m.ko*" | head -n 1)
    [ -n "$f" ] || skip "module $m not found under $moddir"
    case "$f" in
    *.ko) cp "$f" "$ird/mod/$m.ko" ;;
    *.ko.xz) xz -dc "$f" > "$ird/mod/$m.ko" ;;
    *.ko.zst) zstd -qdc "$f" > "$ird/mod/$m.ko" ;;
    *.ko.gz) gzip -dc "$f" > "$ird/mod/$m.ko" ;;
    esac
done
cat > "$ird/init" <<INIT
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t devtmpfs dev /dev
for m in $(echo $mods); do
    /bin/busybox insmod /mod/\$m.ko || echo "braid-vm: insmod \$m failed"
done
if ! /bin/busybox mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /newroot; then
    echo "braid-vm: mounting the host root failed"
    echo "BRAID_VM_RC=1"
    /bin/busybox poweroff -f
fi
/bin/busybox umount /dev
/bin/busybox umount /proc
exec /bin/busybox switch_root /newroot /bin/sh $here/guest-init.sh
INIT
chmod +x "$ird/init"
(cd "$ird" && find . | "$bb" cpio -o -H newc 2>/dev/null | gzip -1 > "$work/initramfs.gz")

# The command, run by guest-init.sh from the shared directory.
{
    echo "cd $(printf '%q' "$PWD") || exit 1"
    printf '%q ' "$@"
    echo
} > "$work/cmd.sh"

# The guest sees the host's root, but mounts its own tmpfs on /tmp, /run, /var/tmp and
# /mnt: the project (this checkout), the command's directory and the directories its
# arguments name are shared once more, read-only, at the same paths (a checkout or build
# under /tmp, as a CI runner may make, is then still there).
shares=()
add_share() {
    local d
    d=$(cd "$1" 2>/dev/null && pwd) || return 0
    for s in "${shares[@]}"; do
        [ "$s" = "$d" ] && return 0
    done
    if [ ${#shares[@]} -lt 6 ]; then
        shares+=("$d")
    fi
}
add_share "$here/../.."
add_share "$PWD"
for a in "$@"; do
    if [ "${a#/}" != "$a" ] && [ -d "$a" ]; then
        add_share "$a"
    fi
done
share_opts=()
: > "$work/shares"
for i in "${!shares[@]}"; do
    share_opts+=(-fsdev "local,id=vmshare$i,path=${shares[$i]},security_model=none,readonly=on,multidevs=remap"
                 -device "virtio-9p-pci,fsdev=vmshare$i,mount_tag=vmshare$i")
    echo "vmshare$i ${shares[$i]}" >> "$work/shares"
done

accel=${BRAID_VM_ACCEL:-tcg}
accel_opt="-accel tcg,thread=multi"
[ "$accel" = kvm ] && accel_opt="-accel kvm -cpu host"
log=$out/console.log
echo "run-vm: $kernel, $accel, ${mem} MiB, $smp cpus, timeout ${timeout_s}s" >&2
start=$(date +%s)
# shellcheck disable=SC2086
"$qemu" -nodefaults -no-reboot -nographic -nic none $accel_opt -m "$mem" -smp "$smp" \
    -kernel "$kernel" -initrd "$work/initramfs.gz" \
    -append "console=ttyS0 panic=-1 quiet loglevel=4 rdinit=/init" \
    -serial "file:$log" -monitor none \
    -fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap \
    -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
    -fsdev local,id=vmwork,path="$work",security_model=none \
    -device virtio-9p-pci,fsdev=vmwork,mount_tag=vmwork \
    -fsdev local,id=vmout,path="$out",security_model=none \
    -device virtio-9p-pci,fsdev=vmout,mount_tag=vmout "${share_opts[@]}" &
qpid=$!
if [ "${BRAID_VM_VERBOSE:-0}" = 1 ]; then
    tail -F "$log" 2>/dev/null >&2 &
    tailpid=$!
fi
rc_q=0
end=$((start + timeout_s))
while kill -0 "$qpid" 2>/dev/null; do
    if [ "$(date +%s)" -ge "$end" ]; then
        echo "run-vm: the guest did not finish within ${timeout_s}s; killing QEMU" >&2
        kill -9 "$qpid" 2>/dev/null || true
        rc_q=124
        break
    fi
    sleep 1
done
wait "$qpid" 2>/dev/null || true
qpid=""
[ -n "${tailpid:-}" ] && kill "$tailpid" 2>/dev/null
echo "run-vm: guest ran $(($(date +%s) - start))s" >&2
if [ "${BRAID_VM_VERBOSE:-0}" != 1 ] && [ -f "$out/cmd.log" ]; then
    cat "$out/cmd.log"
fi
if [ "$rc_q" = 124 ]; then
    tail -n 40 "$log" >&2 || true
    exit 124
fi
rc=$(grep -a -o 'BRAID_VM_RC=[0-9]*' "$log" | tail -n 1 | cut -d= -f2 || true)
if [ -z "$rc" ]; then
    echo "run-vm: the guest stopped without reporting a status; its console:" >&2
    tail -n 60 "$log" >&2 || true
    exit 1
fi
exit "$rc"
