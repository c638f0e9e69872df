#!/bin/busybox sh
# The VM's first process (test/vm/make-vm.sh puts it in the initramfs): this machine's / over 9p,
# read-only, with fresh proc, sys, dev, tmp and run, a cgroup v2 hierarchy with every controller,
# then inside.sh there; the kernel's command line names the repo, node's directory and the user.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
for m in netfs 9pnet 9pnet_virtio 9p; do insmod "/mod/$m.ko" || echo "VMFAIL insmod $m"; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 host /host ||
  echo "VMFAIL mount 9p"
arg() { tr ' ' '\n' </proc/cmdline | sed -n "s/^cvisor\.$1=//p"; }
repo="$(arg repo)"
mount -t proc proc /host/proc
mount -t sysfs sys /host/sys
mount -t devtmpfs dev /host/dev
mkdir -p /host/dev/pts
mount -t devpts -o newinstance,ptmxmode=0666 devpts /host/dev/pts
# Fresh /tmp and /run, with the repo (CI clones it under /tmp) bound back in where it was.
mkdir -p /repo
mount -o bind "/host$repo" /repo
mount -t tmpfs tmp /host/tmp
mount -t tmpfs run /host/run
mkdir -p "/host$repo" 2>/dev/null
mount -o bind /repo "/host$repo"
mount -t cgroup2 cgroup2 /host/sys/fs/cgroup
ip link set lo up
chroot /host /bin/bash "$repo/test/vm/inside.sh" "$repo" "$(arg node)" "$(arg user)"
echo "VMEND"
poweroff -f
