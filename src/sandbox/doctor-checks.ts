// The checks of `cvisor doctor`: each turns a real try (the native probe, a mkdir in a
// cgroup, a write in the state directory) into a status with a one-line fix.
import { accessSync, constants, lstatSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { errnoName, type ProbeResult } from "../core/native.js";
import { CREDENTIAL_STORES, credentialPaths } from "../paths.js";
import { makeDirs } from "../store/make-dirs.js";
import {
  CONTROLLERS,
  parseMountinfo,
  parseProcCgroup,
  realCgroupFs,
  v1Dir,
  v2Controllers,
  v2Home,
  v2Parent,
  type CgroupFs,
  type Controller,
  type Mount,
  type V2Home,
  type V2Parent,
} from "./cgroups.js";
import { SHIM_ENV } from "./shim.js";

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
  shim: "fstat stays a native call in guests (else each one is answered by the supervisor)",
  state_dir: "named sandboxes, snapshots, caches and runs in progress live there",
  credentials: "keeping tokens and keys of common tools out of the guest's reach",
  cgroup_v2:
    "--memory, --pids-limit and --cpus: each run gets one cgroup v2 for the controllers v2 has",
  cgroup_v1: "the limits cgroup v2 cannot hold here: each run gets a cgroup of each v1 controller",
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

/**
 * The guests' shim: present, and a kernel that answers a NULL-path fstat about the fd alone
 * (Linux 6.11), which is what the shim turns glibc's fstat into. `release` is os.release().
 */
export function shimCheck(shim: string | undefined, release: string): Check {
  const id = "shim";
  const name = "native fstat in guests";
  if (!shim) {
    const detail = `off ($${SHIM_ENV}=off, or no libcvisor-shim.so in the core)`;
    return check(id, name, "warn", detail, "npm run build:native");
  }
  const [major = 0, minor = 0] = release.split(".").map((x) => parseInt(x, 10));
  if (major < 6 || (major === 6 && minor < 11)) {
    const detail = `Linux ${release}: fstat with a NULL path needs 6.11; every fstat is notified`;
    return check(id, name, "warn", detail, "a Linux 6.11 or later kernel");
  }
  return check(id, name, "ok", shim);
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

/** The cgroup checks, from the texts of /proc/self/{mountinfo,cgroup} and the cgroup files (the
 * real ones, or a test's stand-in): nothing changes but a child cgroup made and removed. */
export function cgroupChecks(mountinfo: string, procCgroup: string, fs: CgroupFs): Check[] {
  const mounts = parseMountinfo(mountinfo);
  const paths = parseProcCgroup(procCgroup);
  const v2 = v2Results(mounts, paths, fs);
  const v1 = v1Controllers(mounts, paths, fs);
  let v2Check = cgroupV2Check(v2);
  // Where v1 holds every limit, what v2 lacks costs nothing.
  const v1Holds = CONTROLLERS.every((c) => v1.get(c)?.err === null);
  if (v2Check.status === "warn" && v1Holds) {
    v2Check = { ...v2Check, status: "ok", detail: `not used: ${v2Check.detail}` };
    delete v2Check.fix;
  }
  return [v2Check, cgroupV1Check(v1, v2), limitsCheck(v1, v2)];
}

/** The v2 hierarchy: this process's place in it, its controllers, where runs' cgroups go. */
interface V2Results {
  home: V2Home | null;
  have: Controller[];
  parent: V2Parent | null;
}

function v2Results(mounts: Mount[], paths: Map<string, string>, fs: CgroupFs): V2Results {
  const home = v2Home(mounts, paths);
  if (!home) return { home, have: [], parent: null };
  const have = v2Controllers(home, fs);
  return { home, have, parent: have.length > 0 ? v2Parent(have, home, fs, true) : null };
}

/** The v2 cgroup that holds a controller's limit, or why none does. */
function v2Holds(v2: V2Results, c: Controller): { dir: string } | { why: string } {
  if (!v2.home) return { why: "no cgroup v2 hierarchy" };
  if (!v2.have.includes(c)) return { why: `the v2 hierarchy has no ${c} controller` };
  return v2.parent ?? { why: "no cgroup v2 parent" };
}

function cgroupV2Check(v2: V2Results): Check {
  const name = "cgroup v2";
  if (!v2.home) {
    return check(
      "cgroup_v2",
      name,
      "warn",
      "no cgroup v2 hierarchy",
      "mount cgroup2 (boot with systemd.unified_cgroup_hierarchy=1)",
    );
  }
  if (v2.have.length === 0) {
    return check(
      "cgroup_v2",
      name,
      "warn",
      `the hierarchy at ${v2.home.root} has no memory, pids or cpu controller (this host binds them to v1)`,
      "boot with systemd.unified_cgroup_hierarchy=1 to give them to v2",
    );
  }
  if (v2.parent && "dir" in v2.parent) {
    return check(
      "cgroup_v2",
      name,
      "ok",
      `each run gets a cgroup under ${v2.parent.dir} (${v2.have.join(", ")})`,
    );
  }
  return check(
    "cgroup_v2",
    name,
    "warn",
    v2.parent?.why ?? "no cgroup v2 parent",
    "run as root, or in a delegated cgroup (systemd-run --user --scope -p Delegate=yes ...)",
  );
}

/** Each v1 controller a limit needs: its directory, and the errno of a try there (null: works). */
type V1Results = Map<Controller, { dir: string; err: string | null } | null>;

function v1Controllers(mounts: Mount[], paths: Map<string, string>, fs: CgroupFs): V1Results {
  const out: V1Results = new Map();
  for (const controller of CONTROLLERS) {
    const dir = v1Dir(controller, mounts, paths);
    if (dir === null) {
      out.set(controller, null);
      continue;
    }
    const child = join(dir, `cvisor-doctor-${process.pid}`);
    const err = fs.mkdir(child);
    if (err === null) fs.rmdir(child);
    out.set(controller, { dir, err });
  }
  return out;
}

function cgroupV1Check(v1: V1Results, v2: V2Results): Check {
  const name = "cgroup v1";
  const needed = CONTROLLERS.filter((c) => !("dir" in v2Holds(v2, c)));
  if (needed.length === 0) {
    return check("cgroup_v1", name, "ok", "not needed: cgroup v2 holds every limit");
  }
  const mounted = [...v1].filter(([c, r]) => r !== null && needed.includes(c));
  if (mounted.length === 0) {
    return check(
      "cgroup_v1",
      name,
      "warn",
      `${needed.join(", ")} controller(s) not mounted`,
      `mount the v1 ${needed.join(", ")} controller(s), or use cgroup v2`,
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
function limitsCheck(v1: V1Results, v2: V2Results): Check {
  const flags = { memory: "--memory", pids: "--pids-limit", cpu: "--cpus" } as const;
  const lines: string[] = [];
  let missing = 0;
  for (const controller of CONTROLLERS) {
    const inV2 = v2Holds(v2, controller);
    if ("dir" in inV2) {
      lines.push(`${flags[controller]}: cgroup v2 (${inV2.dir})`);
      continue;
    }
    const r = v1.get(controller) ?? null;
    if (r !== null && r.err === null) {
      lines.push(`${flags[controller]}: cgroup v1 (${r.dir})`);
      continue;
    }
    missing++;
    const v1Why = r === null ? `no v1 ${controller} controller` : `v1 ${controller}: ${r.err}`;
    lines.push(
      `${flags[controller]}: the supervisor ${SUPERVISOR[controller]} (cgroup v2: ${inV2.why}; ${v1Why})`,
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
    "for the kernel to enforce them: run as root, or in a delegated cgroup v2 subtree (systemd-run --user --scope -p Delegate=yes ...), or chown this process's v1 memory, pids and cpu cgroups to this user",
  );
}

/** The cgroup checks on this machine. */
export function hostCgroupChecks(): Check[] {
  const read = (file: string): string => realCgroupFs.read(file) ?? "";
  return cgroupChecks(read("/proc/self/mountinfo"), read("/proc/self/cgroup"), realCgroupFs);
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
