#!/usr/bin/env bash
# Makes what test/vm/cgroup-v2.test.ts boots: Debian's kernel (bookworm-backports' linux-image-
# amd64, with cgroup v2, Landlock and the 9p modules) and an initramfs of busybox-static, those
# modules and init.sh, which mounts this machine's / read-only over 9p and runs inside.sh there.
# The kernel package is kept in CACHE; nothing is installed on this machine.
#   make-vm.sh CACHE OUT     (writes OUT/vmlinuz and OUT/initrd.gz)
set -euo pipefail
cache="$1"
out="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$cache" "$out"

# The newest backports kernel, with an apt state of our own (the machine's sources are untouched).
apt_dir="$cache/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial"
echo "deb http://deb.debian.org/debian bookworm-backports main" >"$apt_dir/sources.list"
apt=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o "Dir::Etc::sourceparts=-"
  -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir" -o "APT::Sandbox::User=root")
deb="$(ls "$cache"/linux-image-*.deb 2>/dev/null | head -n 1 || true)"
if [ -z "$deb" ]; then
  apt-get "${apt[@]}" update -qq >/dev/null
  pkg="$(apt-cache "${apt[@]}" depends linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -n 1)"
  [ -n "$pkg" ] || { echo "make-vm: no linux-image-amd64 in bookworm-backports" >&2; exit 1; }
  (cd "$cache" && apt-get "${apt[@]}" download "$pkg" >/dev/null)
  deb="$(ls "$cache"/linux-image-*.deb | head -n 1)"
fi
kx="$(mktemp -d)"
trap 'rm -rf "$kx"' EXIT
dpkg-deb -x "$deb" "$kx"
cp "$kx"/boot/vmlinuz-* "$out/vmlinuz"

ir="$kx/initramfs"
mkdir -p "$ir/bin" "$ir/mod" "$ir/host" "$ir/proc" "$ir/sys" "$ir/dev"
busybox="$(command -v busybox)"
if ldd "$busybox" >/dev/null 2>&1; then
  echo "make-vm: $busybox is linked dynamically; the initramfs needs busybox-static" >&2
  exit 1
fi
cp "$busybox" "$ir/bin/busybox"
for m in fs/netfs/netfs net/9p/9pnet net/9p/9pnet_virtio fs/9p/9p; do
  xz -dc "$kx"/lib/modules/*/kernel/"$m".ko.xz >"$ir/mod/$(basename "$m").ko"
done
install -m 0755 "$here/init.sh" "$ir/init"
(cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1) >"$out/initrd.gz"
