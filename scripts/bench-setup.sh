#!/bin/sh
# Installs the benchmark peers (bubblewrap, proot, gVisor runsc) and hyperfine.
# Never fails hard: a package that is unavailable is reported and skipped.
set -u

PKGS="bubblewrap proot runsc hyperfine"

bin_of() {
  case "$1" in
    bubblewrap) echo bwrap ;;
    *) echo "$1" ;;
  esac
}

report() {
  for p in $PKGS; do
    b=$(bin_of "$p")
    if command -v "$b" >/dev/null 2>&1; then
      echo "  [installed] $p ($(command -v "$b"))"
    else
      echo "  [missing]   $p"
    fi
  done
}

# Tries each peer's exact benchmark invocation (see scripts/bench.mjs) once.
check() {
  echo "bench-setup: peer invocations on this machine:"
  scratch=$(mktemp -d)
  try_peer() {
    name=$1
    shift
    command -v "$1" >/dev/null 2>&1 || return 0
    # runsc rewrites a regular-file stdout, so its output always goes to a pipe.
    if out=$("$@" /bin/sh -c 'echo ok' 2>&1 | tail -n 1) && [ "$out" = ok ]; then
      echo "  [works]     $name"
    else
      echo "  [fails]     $name: $out"
    fi
  }
  try_peer bwrap bwrap --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --unshare-all --die-with-parent
  try_peer proot proot -r / -b "$scratch:/tmp"
  try_peer runsc runsc --rootless --network=none --platform=ptrace do
  rm -rf "$scratch"
}

missing=""
for p in $PKGS; do
  command -v "$(bin_of "$p")" >/dev/null 2>&1 || missing="$missing $p"
done

if [ -z "$missing" ]; then
  echo "bench-setup: all packages already installed:"
  report
  check
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "bench-setup: not root; install these yourself:$missing"
  report
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "bench-setup: apt-get not available; install these yourself:$missing"
  report
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
echo "bench-setup: apt-get update"
apt-get update -qq >/dev/null 2>&1 || echo "bench-setup: apt-get update failed (continuing)"

# One transaction first; if any package is unavailable, fall back to one
# package at a time so a missing package does not prevent the others.
# shellcheck disable=SC2086
if apt-get install -y -qq --no-install-recommends $missing >/dev/null 2>&1; then
  echo "bench-setup: installed:$missing"
else
  for p in $missing; do
    if apt-get install -y -qq --no-install-recommends "$p" >/dev/null 2>&1; then
      echo "bench-setup: installed $p"
    else
      echo "bench-setup: could not install $p (not in the archive?)"
    fi
  done
fi

echo "bench-setup: result:"
report
check
exit 0
