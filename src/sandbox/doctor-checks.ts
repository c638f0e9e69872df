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
import { join } from "node:path";
import { errnoName, type ProbeResult } from "../core/native.js";
import { CREDENTIAL_STORES, credentialPaths } from "../paths.js";
import { makeDirs } from "../store/make-dirs.js";
import { cgroupDir, parseMountinfo, parseProcCgroup, v1Dir, type Mount } from "./cgroups.js";

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
  cgroup_v2: "resource limits: not used yet (cvisor enforces them with cgroup v1 today)",
  cgroup_v1: "--memory, --pids-limit and --cpus: each run gets a cgroup of each controller",
  limits:
    "which mechanism enforces each of --memory, --pids-limit, --cpus and --disk here, for this user",
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
    "use Linux ≥ 5.6 and allow ptrace of own children (sysctl kernel.yama.ptrace_scope=1 or lower); " +
      "in a Docker container: docker run --cap-add SYS_PTRACE (its seccomp profile allows pidfd_getfd only then)",
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
  const v1 = v1Controllers(mounts, paths, tryDir);
  return [v2, cgroupV1Check(v1), limitsCheck(v1, v2)];
}

/** Each v1 controller a limit needs: its directory, and the errno of a try there (null: works). */
type V1Results = Map<"memory" | "pids" | "cpu", { dir: string; err: string | null } | null>;

function v1Controllers(mounts: Mount[], paths: Map<string, string>, tryDir: TryCgroup): V1Results {
  const out: V1Results = new Map();
  for (const controller of ["memory", "pids", "cpu"] as const) {
    const dir = v1Dir(controller, mounts, paths);
    out.set(controller, dir === null ? null : { dir, err: tryDir(dir) });
  }
  return out;
}

function cgroupV1Check(v1: V1Results): Check {
  const name = "cgroup v1 writable";
  const mounted = [...v1].filter(([, r]) => r !== null);
  if (mounted.length === 0) {
    return check(
      "cgroup_v1",
      name,
      "warn",
      "memory, pids and cpu controllers not mounted",
      "mount the v1 memory, pids and cpu controllers",
    );
  }
  const detail = mounted
    .map(([c, r]) => (r?.err === null ? `${c}: ${r.dir}` : `${c}: ${r?.err} on ${r?.dir}`))
    .join("; ");
  if (mounted.every(([, r]) => r?.err === null)) return check("cgroup_v1", name, "ok", detail);
  const fix = "run as root, or chown the memory, pids and cpu cgroups to this user";
  return check("cgroup_v1", name, "warn", detail, fix);
}

/** How the supervisor holds a limit where no cgroup can. */
const SUPERVISOR = {
  memory: "samples the tree's memory every 20 ms",
  pids: "counts the tree's tasks at each fork",
  cpu: "stops the tree while it is ahead of its share",
} as const;

/** Per limit, what enforces it for this user here, and why not a better one. */
function limitsCheck(v1: V1Results, v2: Check): Check {
  const flags = { memory: "--memory", pids: "--pids-limit", cpu: "--cpus" } as const;
  const lines: string[] = [];
  let missing = 0;
  for (const [controller, r] of v1) {
    if (r !== null && r.err === null) {
      lines.push(`${flags[controller]}: cgroup v1 (${r.dir})`);
      continue;
    }
    missing++;
    const v1Why = r === null ? `no v1 ${controller} controller` : `v1 ${controller}: ${r.err}`;
    const v2Why = v2.status === "ok" ? "cgroup v2: not used yet" : `cgroup v2: ${v2.detail}`;
    lines.push(
      `${flags[controller]}: the supervisor ${SUPERVISOR[controller]} (${v1Why}; ${v2Why})`,
    );
  }
  // No cgroup controller holds a layer's size, wherever cvisor runs.
  lines.push(
    "--disk: the supervisor walks the sandbox's layer (every 20 ms, less often when it is large)",
  );
  const detail = lines.join("; ");
  if (missing === 0) return check("limits", "resource limits", "ok", detail);
  return check(
    "limits",
    "resource limits",
    "warn",
    detail,
    "for the kernel to enforce them: run as root, or chown this process's v1 memory, pids and cpu cgroups to this user",
  );
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
