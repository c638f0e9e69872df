#!/usr/bin/env bash
# Makes, without a registry, the image the Dockerfile's FROM names (node:20-bookworm-slim), the
# way the official one is laid out: Debian bookworm (debootstrap --variant=minbase) with this
# machine's Node 20 in /usr/local (node, npm, npx, and Node's headers for node-gyp), a `node`
# user with uid 1000, PATH and CMD ["node"]. Used by test/container/image.test.ts; a machine
# that can pull from Docker Hub does not need it.
#   base-image.sh TAG WORKDIR
set -euo pipefail
tag="$1"
work="$2"

node_bin="$(command -v node)"
major="$("$node_bin" -p 'process.versions.node.split(".")[0]')"
if [ "$major" != "20" ]; then
  echo "base-image: this machine's node is $("$node_bin" --version), the image needs Node 20" >&2
  exit 1
fi
node_prefix="$(dirname "$(dirname "$(readlink -f "$node_bin")")")"
npm_dir="$node_prefix/lib/node_modules/npm"
headers="$node_prefix/include/node"
for need in "$npm_dir/bin/npm-cli.js" "$headers/node.h"; do
  [ -e "$need" ] || { echo "base-image: $need is missing" >&2; exit 1; }
done

rootfs="$work/rootfs"
rm -rf "$rootfs"
mkdir -p "$rootfs"
debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 ||
  { tail -n 20 "$work/debootstrap.log" >&2; exit 1; }

install -m 0755 "$node_bin" "$rootfs/usr/local/bin/node"
mkdir -p "$rootfs/usr/local/lib/node_modules" "$rootfs/usr/local/include"
cp -a "$npm_dir" "$rootfs/usr/local/lib/node_modules/npm"
cp -a "$headers" "$rootfs/usr/local/include/node"
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$rootfs/usr/local/bin/npx"
chroot "$rootfs" groupadd --gid 1000 node
chroot "$rootfs" useradd --uid 1000 --gid node --shell /bin/bash --create-home node
# The registry's TLS as this machine sees it (its CAs, a proxy's among them), for npm in the
# build stage: given to Node itself, so that it holds for any npm prefix.
ca_env=()
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  mkdir -p "$rootfs/usr/local/share/ca-certificates"
  cp /etc/ssl/certs/ca-certificates.crt "$rootfs/usr/local/share/ca-certificates/host.pem"
  ca_env=(--change 'ENV NODE_EXTRA_CA_CERTS=/usr/local/share/ca-certificates/host.pem')
fi
rm -rf "$rootfs/var/cache/apt/archives"/*.deb "$rootfs/var/lib/apt/lists"/*

tar -C "$rootfs" -c . | podman import --quiet \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change "ENV NODE_VERSION=$("$node_bin" -p process.versions.node)" \
  "${ca_env[@]}" --change 'CMD ["node"]' - "$tag" >/dev/null
rm -rf "$rootfs"
echo "base-image: $tag"
