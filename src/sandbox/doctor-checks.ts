// The checks of `cvisor doctor`: each turns a real try (the native probe, a mkdir in a
// cgroup, a write in the state directory) into a status with a one-line fix.
import {
  accessSync,
  constants,
  lstatSync,
  mkdirSync,
  readFileSync,
  rmdirSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { join, relative } from "node:path";
import { errnoName, type ProbeResult } from "../core/native.js";
import { CREDENTIAL_STORES, credentialPaths } from "../paths.js";
import { makeDirs } from "../store/make-dirs.js";

/** One line of the doctor's report. */
export interface Check {
  id: string;
  name: string;
  /** ok: works; warn: works, degraded; fail: sandboxes cannot run. */
  status: "ok" | "warn" | "fail";
  detail: string;
  /** What cvisor needs it for. */
  purpose?: string;
  fix?: string;
}

/** What each check is for, as the report says it under the check. */
const PURPOSE: Record<string, string> = {
  seccomp_unotify: "the supervisor decides each file, socket and process system call of the guest",
  addfd_send: "files the supervisor opens (the sandbox's copies) are handed to the guest",
  sync_wakeup: "shorter round trips between the guest and the supervisor",
  killable_recv: "a signal does not restart a call the supervisor is still answering",
  pidfd_open: "the supervisor reaches the sandbox's own processes, and no others",
  pidfd_getfd: "the supervisor decides on its own copy of a guest file descriptor",
  landlock: "the kernel itself keeps the guest from writing the host and reading hidden paths",
  proc_mem_force: "running programs that exist only in the sandbox (the exec relay)",
  native: "the C core every sandbox runs on",
  kernel: "the kernel features above, tried by the helper",
  helper: "starts each sandbox (seccomp filter, Landlock) and probes the kernel",
  state_dir: "named sandboxes, snapshots, caches and runs in progress live there",
  credentials: "keeping tokens and keys of common tools out of the guest's reach",
  cgroup_v2: "resource limits (memory, processes, CPU); not used yet: cvisor sets none today",
  cgroup_v1: "resource limits (memory, processes, CPU); not used yet: cvisor sets none today",
};

function check(
  id: string,
  name: string,
  status: Check["status"],
  detail: string,
  fix?: string,
): Check {
  const purpose = PURPOSE[id];
  return {
    id,
    name,
    status,
    detail,
    ...(purpose !== undefined ? { purpose } : {}),
    ...(status !== "ok" && fix !== undefined ? { fix } : {}),
  };
}

function why(errno: number): string {
  return errno > 0 ? ` (${errnoName(errno)})` : "";
}

/** The kernel feature checks, from a cv_probe result. */
export function probeChecks(p: ProbeResult): Check[] {
  const checks: Check[] = [];
  const feature = (
    id: string,
    name: string,
    ok: boolean,
    level: "warn" | "fail",
    missing: string,
    fix: string,
  ): void => {
    checks.push(check(id, name, ok ? "ok" : level, ok ? "available" : missing, fix));
  };
  feature(
    "seccomp_unotify",
    "seccomp user notification",
    p.seccompUnotify,
    "fail",
    `unavailable${why(p.seccompErrno)}`,
    "use Linux ≥ 5.5 with CONFIG_SECCOMP_FILTER; in a container, allow seccomp (docker: --security-opt seccomp=unconfined)",
  );
  feature(
    "addfd_send",
    "ADDFD with SEND",
    p.addfdSend,
    "fail",
    `unavailable${why(p.addfdErrno)}`,
    "use Linux ≥ 5.14 (SECCOMP_ADDFD_FLAG_SEND)",
  );
  feature(
    "sync_wakeup",
    "sync wake-up flag",
    p.syncWakeup,
    "warn",
    "unavailable: notifications take a little longer",
    "use Linux ≥ 6.6 (SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP)",
  );
  feature(
    "killable_recv",
    "killable receive",
    p.killableRecv,
    "warn",
    "unavailable: a signal during a notified call makes it restart",
    "use Linux ≥ 5.19 (SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV)",
  );
  feature(
    "pidfd_open",
    "pidfd_open",
    p.pidfdOpen,
    "fail",
    `unavailable${why(p.pidfdErrno)}`,
    "use Linux ≥ 5.3; in a container, allow pidfd_open in the seccomp profile",
  );
  feature(
    "pidfd_getfd",
    "pidfd_getfd",
    p.pidfdGetfd,
    "fail",
    `unavailable${why(p.pidfdErrno)}`,
    "use Linux ≥ 5.6 and allow ptrace of own children (sysctl kernel.yama.ptrace_scope=1 or lower)",
  );
  checks.push(landlockCheck(p));
  feature(
    "proc_mem_force",
    "forced /proc/pid/mem writes",
    p.procMemForce,
    "warn",
    `refused${why(p.procMemErrno)}: needed later to exec programs from the overlay`,
    "boot without proc_mem.force_override=never",
  );
  return checks;
}

function landlockCheck(p: ProbeResult): Check {
  const name = "Landlock";
  if (p.landlockAbi <= 0) {
    return check(
      "landlock",
      name,
      "fail",
      `unavailable${why(p.landlockErrno)}`,
      'use Linux ≥ 5.13 with CONFIG_SECURITY_LANDLOCK and "landlock" in the lsm= boot parameter',
    );
  }
  if (p.landlockAbi < 6) {
    return check(
      "landlock",
      name,
      "warn",
      `ABI ${p.landlockAbi}: signals are checked by the supervisor instead of Landlock scopes`,
      "use Linux ≥ 6.12 for Landlock ABI 6",
    );
  }
  return check("landlock", name, "ok", `ABI ${p.landlockAbi}`);
}

/** The check shown in place of the kernel checks when the native core cannot be used. */
export function nativeFailureCheck(message: string): Check {
  return check("native", "native core", "fail", message, "npm run build:native");
}

/** The kernel checks need the helper (it runs the tries): without it they are unknown. */
export function kernelChecks(p: ProbeResult): Check[] {
  if (p.helperOk) return probeChecks(p);
  const detail = "not checked: cvisor-helper could not run the tries";
  return [check("kernel", "kernel features", "fail", detail, "npm run build:native")];
}

/** The helper binary: present, executable, and it ran `cvisor-helper probe`. */
export function helperCheck(path: string, p: ProbeResult | undefined): Check {
  const id = "helper";
  const name = "helper present and runnable";
  const fix = "npm run build:native";
  try {
    accessSync(path, constants.X_OK);
  } catch (err) {
    return check(id, name, "fail", `${path}: ${errCode(err)}`, fix);
  }
  if (!p) return check(id, name, "warn", `${path} present; not run (no native core)`, fix);
  if (!p.helperOk) return check(id, name, "fail", `${path} did not run${why(p.helperErrno)}`, fix);
  return check(id, name, "ok", path);
}

/** The state directory: created if needed, then a file written and removed in it. */
export function stateDirCheck(dir: string): Check {
  const name = "state directory writable";
  const probe = join(dir, `.doctor-${process.pid}`);
  try {
    makeDirs(dir);
    writeFileSync(probe, "cvisor doctor\n");
    rmSync(probe, { force: true });
    return check("state_dir", name, "ok", dir);
  } catch (err) {
    return check(
      "state_dir",
      name,
      "fail",
      `cannot write in ${dir} (${errCode(err)})`,
      "set CVISOR_HOME to a writable directory",
    );
  }
}

function errCode(err: unknown): string {
  if (err && typeof err === "object" && "code" in err && typeof err.code === "string")
    return err.code;
  return err instanceof Error ? err.message : String(err);
}

/** A mount from /proc/self/mountinfo. */
export interface Mount {
  root: string;
  mountPoint: string;
  fsType: string;
  superOptions: string[];
}

/** Parses /proc/self/mountinfo. */
export function parseMountinfo(text: string): Mount[] {
  const unescape = (s: string): string =>
    s.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)));
  const mounts: Mount[] = [];
  for (const line of text.split("\n")) {
    const [left, right] = line.split(" - ");
    if (!left || !right) continue;
    const fields = left.split(" ");
    const [fsType, , superOptions] = right.split(" ");
    if (fields[3] === undefined || fields[4] === undefined || fsType === undefined) continue;
    mounts.push({
      root: unescape(fields[3]),
      mountPoint: unescape(fields[4]),
      fsType,
      superOptions: (superOptions ?? "").split(","),
    });
  }
  return mounts;
}

/** Parses /proc/self/cgroup into controller list → path ("" is the v2 hierarchy). */
export function parseProcCgroup(text: string): Map<string, string> {
  const paths = new Map<string, string>();
  for (const line of text.split("\n")) {
    const match = /^\d+:([^:]*):(.*)$/.exec(line);
    if (match) paths.set(match[1] ?? "", match[2] ?? "/");
  }
  return paths;
}

/** The directory of this process's cgroup inside a mount, or null when outside it. */
function cgroupDir(mount: Mount, path: string): string | null {
  const rel = relative(mount.root, path);
  if (rel.startsWith("..")) return null;
  return join(mount.mountPoint, rel);
}

/** errno name of a failed mkdir+rmdir of a child cgroup, or null when it worked. */
export type TryCgroup = (dir: string) => string | null;

/** The real try: create and remove a child directory. */
export const tryCgroup: TryCgroup = (dir) => {
  const child = join(dir, `cvisor-doctor-${process.pid}`);
  try {
    mkdirSync(child);
    rmdirSync(child);
    return null;
  } catch (err) {
    return errCode(err);
  }
};

/** Both cgroup checks, from the texts of /proc/self/{mountinfo,cgroup} and a way to try. */
export function cgroupChecks(mountinfo: string, procCgroup: string, tryDir: TryCgroup): Check[] {
  const mounts = parseMountinfo(mountinfo);
  const paths = parseProcCgroup(procCgroup);
  const v2Name = "cgroup v2 writable";
  const v2Fix =
    "run as root, or in a delegated cgroup (systemd-run --user --scope -p Delegate=yes ...)";
  let v2: Check;
  const v2Mounts = mounts.filter((m) => m.fsType === "cgroup2");
  const v2Path = paths.get("");
  if (v2Mounts.length === 0 || v2Path === undefined) {
    v2 = check(
      "cgroup_v2",
      v2Name,
      "warn",
      "no cgroup v2 hierarchy",
      "mount cgroup2 (boot with systemd.unified_cgroup_hierarchy=1)",
    );
  } else {
    const dirs = v2Mounts.map((m) => cgroupDir(m, v2Path)).filter((d): d is string => d !== null);
    const dir = dirs[0] ?? v2Mounts[0]?.mountPoint ?? "/sys/fs/cgroup";
    const err = tryDir(dir);
    v2 =
      err === null
        ? check("cgroup_v2", v2Name, "ok", `can create cgroups under ${dir}`)
        : check("cgroup_v2", v2Name, "warn", `cannot create a cgroup under ${dir} (${err})`, v2Fix);
  }
  return [v2, cgroupV1Check(mounts, paths, tryDir, v2.status === "ok")];
}

function cgroupV1Check(
  mounts: Mount[],
  paths: Map<string, string>,
  tryDir: TryCgroup,
  v2Works: boolean,
): Check {
  const name = "cgroup v1 writable";
  const results: string[] = [];
  let ok = 0;
  let mounted = 0;
  for (const controller of ["memory", "pids"]) {
    const mount = mounts.find((m) => m.fsType === "cgroup" && m.superOptions.includes(controller));
    if (!mount) continue;
    mounted++;
    const path = [...paths].find(([list]) => list.split(",").includes(controller))?.[1] ?? "/";
    const dir = cgroupDir(mount, path) ?? mount.mountPoint;
    const err = tryDir(dir);
    if (err === null) ok++;
    results.push(err === null ? `${controller}: ${dir}` : `${controller}: ${err} on ${dir}`);
  }
  if (mounted === 0) {
    return v2Works
      ? check("cgroup_v1", name, "ok", "not mounted (cgroup v2 is used)")
      : check(
          "cgroup_v1",
          name,
          "warn",
          "memory and pids controllers not mounted",
          "mount cgroup v2 or the v1 memory and pids controllers",
        );
  }
  const detail = results.join("; ");
  const fix = "run as root, or chown the memory and pids cgroups to this user";
  if (ok === mounted) return check("cgroup_v1", name, "ok", detail);
  if (v2Works) return check("cgroup_v1", name, "ok", `${detail} (not needed: cgroup v2 works)`);
  return check("cgroup_v1", name, "warn", detail, fix);
}

/** The cgroup checks on this machine. */
export function hostCgroupChecks(): Check[] {
  const read = (file: string): string => {
    try {
      return readFileSync(file, "utf8");
    } catch {
      return "";
    }
  };
  return cgroupChecks(read("/proc/self/mountinfo"), read("/proc/self/cgroup"), tryCgroup);
}

/**
 * The credential stores hidden by default that exist on this machine (guests see none of them
 * unless a run exposes one). `home` shortens paths for the report.
 */
export function credentialCheck(env: NodeJS.ProcessEnv, home: string): Check {
  const present = credentialPaths(env).filter((p) => {
    try {
      lstatSync(p);
      return true;
    } catch {
      return false;
    }
  });
  const short = (p: string): string => (p.startsWith(`${home}/`) ? `~${p.slice(home.length)}` : p);
  const known = CREDENTIAL_STORES.length;
  const detail =
    present.length === 0
      ? `none of the ${known} known credential stores exists here`
      : `${present.length} of ${known} known stores exist here, hidden from guests (--expose PATH gives one back): ${present.map(short).join(", ")}`;
  return check("credentials", "credentials hidden", "ok", detail);
}
