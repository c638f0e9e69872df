#!/bin/bash
# In the VM (test/vm/init.sh): the limits suite on cgroup v2, laid out as systemd lays it out —
# as root from a session scope, and as an unprivileged user from a scope in its delegated
# user@UID.service — then doctor's line for a user without a delegated subtree. Each result is
# one VM* line on the console for test/vm/cgroup-v2.test.ts.
#   inside.sh REPO NODE_DIR USER
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
repo="$1"
node_dir="$2"
user="$3"
cg=/sys/fs/cgroup
all="+cpu +memory +pids"
env_of() {
  echo PATH="$node_dir:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    HOME="$1" USER="$2" LOGNAME="$2" LANG=C.UTF-8 CI=true
}
suite() { cd "$repo" && node --test --test-reporter=tap dist/test/e2e/limits.test.js; }
doctor_limits() {
  cd "$repo" && node dist/cvisor.cjs doctor --json |
    node -e 'const c = JSON.parse(require("fs").readFileSync(0, "utf8")).checks.find((x) => x.id === "limits"); console.log(c.detail)'
}

echo "$all" >"$cg/cgroup.subtree_control"
mkdir -p "$cg/user.slice/user-0.slice/session-1.scope"
echo "$all" >"$cg/user.slice/cgroup.subtree_control"
echo "$all" >"$cg/user.slice/user-0.slice/cgroup.subtree_control"
echo $$ >"$cg/user.slice/user-0.slice/session-1.scope/cgroup.procs"
mkdir -p /tmp/home-root
(export $(env_of /tmp/home-root root) CVISOR_EXPECT_LIMITS=cgroup-v2 && suite)
echo "VMRESULT root $?"

uid="$(id -u "$user")"
slice="$cg/user.slice/user-$uid.slice"
service="$slice/user@$uid.service"
mkdir -p "$service" "$slice/session-2.scope"
echo "$all" >"$slice/cgroup.subtree_control"
chown -R "$user" "$service" # systemd's Delegate=yes: the directory and its files
home="/tmp/home-$user"
mkdir -p "$home" && chown "$user" "$home"
runuser -u "$user" -- sh -c "echo '$all' > '$service/cgroup.subtree_control' &&
  mkdir -p '$service/app.slice/vm-test.scope'"
(
  echo "$BASHPID" >"$service/app.slice/vm-test.scope/cgroup.procs"
  exec runuser -u "$user" -- env -i $(env_of "$home" "$user") CVISOR_EXPECT_LIMITS=cgroup-v2 \
    bash -c "$(declare -f suite); repo='$repo'; suite"
)
echo "VMRESULT user $?"
(
  echo "$BASHPID" >"$slice/session-2.scope/cgroup.procs"
  echo "VMDOCTOR user-undelegated $(runuser -u "$user" -- env -i $(env_of "$home" "$user") \
    bash -c "$(declare -f doctor_limits); repo='$repo'; doctor_limits")"
)
echo "VMDOCTOR user-delegated $(
  echo "$BASHPID" >"$service/app.slice/vm-test.scope/cgroup.procs"
  runuser -u "$user" -- env -i $(env_of "$home" "$user") \
    bash -c "$(declare -f doctor_limits); repo='$repo'; doctor_limits"
)"
