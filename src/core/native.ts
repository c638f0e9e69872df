// The koffi binding of native/include/cvisor.h: the only module that knows the C ABI.
// Everything above it sees typed functions, plain objects and CvisorError.
import { existsSync, realpathSync } from "node:fs";
import { constants as osConstants } from "node:os";
import { dirname, join } from "node:path";
import type * as Koffi from "koffi";
import { coreError, cvErrorName, CV_ERROR, SetupError, UsageError } from "./errors.js";

/** CV_ABI_VERSION of the header this binding was written against. */
export const ABI_VERSION = 11;

/** enum cv_listen. */
const LISTEN = { none: 0, any: 1, loopback: 2 } as const;
/** enum cv_network. */
const NETWORK = { host: 0, none: 1, "allow-list": 2 } as const;

/** An inet destination a run allows (cv_run_add_net_rule): an address prefix and a port range. */
export interface NetRule {
  /** IPv4 or IPv6 text. */
  addr: string;
  prefix: number;
  portLo: number;
  portHi: number;
}

/** enum cv_run_state: how a run ended. */
export const RUN_STATE = { EXITED: 1, SIGNALED: 2, EXEC_FAILED: 3, FAILED: 4 } as const;

/** What a run needs to start; every field maps to one cv_run_set_* / add_* call. */
export interface RunSpec {
  helperPath: string;
  argv: readonly string[];
  /** "KEY=VALUE" strings: the guest environment, exactly. */
  env: readonly string[];
  cwd?: string | undefined;
  /** Fds of this process for the guest's 0, 1, 2; -1 is /dev/null. */
  stdio: readonly [number, number, number];
  /**
   * "host": every inet destination but the cloud metadata range (unless netRules name it);
   * "none": no inet sockets; "allow-list": only the destinations netRules allow.
   */
  network: keyof typeof NETWORK;
  netRules?: readonly NetRule[] | undefined;
  /**
   * TCP connects to these destinations go to 127.0.0.1:port instead, each announced on fd
   * (cv_run_add_net_divert; the run takes a dup, the caller closes fd).
   */
  divert?: { rules: readonly NetRule[]; port: number; fd: number } | undefined;
  /** Destinations a service grants while the run goes (cv_run_set_grant_fd; the run takes a dup). */
  grantFd?: number | undefined;
  /** Where inet ports may be bound and listened on (enum cv_listen). */
  listen: "loopback" | "any" | "none";
  /** 0: no deadline. */
  timeoutMs: number;
  /** Absolute paths the guest must not read. */
  hide: readonly string[];
  /** Host unix sockets (absolute paths) the guest may connect and send to. */
  allowUnix?: readonly string[] | undefined;
  /** The guest's nodename (default "cvisor"). */
  hostname?: string | undefined;
  /** The copy-on-write layer: without it the guest's filesystem is read-only. */
  upper?: { upper: string; work: string } | undefined;
  /** Read-only layers under the upper (a snapshot chain's trees), top first. */
  lowers?: readonly string[] | undefined;
  /** An embedder's hook: these syscalls are described on fd (the run owns it) first. */
  hook?: { syscalls: readonly number[]; fd: number } | undefined;
  /** Trace these syscalls: one line per call on fd (the run writes to its own dup). */
  trace?: { syscalls: readonly number[]; fd: number } | undefined;
  /** The guest's session takes its stdin (a pty slave of openpty) as controlling terminal. */
  ctty?: boolean | undefined;
  /** The run's cgroups (src/sandbox/cgroups.ts): joined before any guest code runs. */
  cgroups?: { procs: readonly string[]; oomV1?: string | undefined } | undefined;
  /** Limits the supervisor holds the tree to itself (where no cgroup can). */
  watch?: { memoryBytes?: number; pids?: number; cpus?: number; diskBytes?: number } | undefined;
}

/** cv_run_limits: what the supervisor's own limits saw. */
export interface WatchedLimits {
  memoryPeak: number;
  pidsPeak: number;
  memoryHit: boolean;
  pidsHit: boolean;
  diskHit: boolean;
  cpuMs: number;
  diskPeak: number;
}

/** cv_run_result, decoded. */
export interface NativeRunResult {
  state: number;
  exitCode: number;
  signal: number;
  timedOut: boolean;
  killed: boolean;
  execErrno: number;
  error: number;
  durationMs: number;
  userMs: number;
  systemMs: number;
  maxRssKb: number;
  notifications: number;
  /** Distinct calls the supervisor refused (their list: denials()). */
  denials: number;
  message: string;
}

/** cv_probe_result, decoded (the *Errno fields as positive errno values, 0 when unknown). */
export interface ProbeResult {
  seccompUnotify: boolean;
  seccompErrno: number;
  addfdSend: boolean;
  addfdErrno: number;
  syncWakeup: boolean;
  killableRecv: boolean;
  pidfdOpen: boolean;
  pidfdGetfd: boolean;
  pidfdErrno: number;
  landlockAbi: number;
  landlockErrno: number;
  procMemForce: boolean;
  procMemErrno: number;
  helperOk: boolean;
  helperErrno: number;
}

type Ptr = bigint;
type Fn<A extends unknown[], R> = (...args: A) => R;

interface Binding {
  runNew: Fn<[string], Ptr | null>;
  addArg: Fn<[Ptr, string], number>;
  addEnv: Fn<[Ptr, string], number>;
  setCwd: Fn<[Ptr, string], number>;
  addHiddenList: Fn<[Ptr, Buffer, number], number>;
  setStdio: Fn<[Ptr, number, number, number], number>;
  setNetwork: Fn<[Ptr, number], number>;
  setAllowListen: Fn<[Ptr, number], number>;
  setTimeoutMs: Fn<[Ptr, number], number>;
  setHostname: Fn<[Ptr, string], number>;
  setCtty: Fn<[Ptr], number>;
  addCgroup: Fn<[Ptr, string], number>;
  watchOomV1: Fn<[Ptr, string], number>;
  setWatchLimits: Fn<[Ptr, bigint, number, number], number>;
  getLimits: Fn<[Ptr, Buffer], number>;
  setDiskLimit: Fn<[Ptr, bigint], number>;
  setUpper: Fn<[Ptr, string, string], number>;
  addLower: Fn<[Ptr, string], number>;
  start: Fn<[Ptr, number[]], number>;
  kill: Fn<[Ptr], number>;
  signal: Fn<[Ptr, number], number>;
  getResult: Fn<[Ptr, Record<string, unknown>], number>;
  statsJson: Fn<[Ptr, Buffer, number], number>;
  addNetRule: Fn<[Ptr, string, number, number, number], number>;
  addNetDivert: Fn<[Ptr, string, number, number, number, string, number], number>;
  setDivertFd: Fn<[Ptr, number], number>;
  setGrantFd: Fn<[Ptr, number], number>;
  resolveHost: Fn<[string, Buffer, number], number>;
  denialsJson: Fn<[Ptr, Buffer, number], number>;
  allowUnix: Fn<[Ptr, string], number>;
  setHook: Fn<[Ptr, Int32Array, number, number], number>;
  setTrace: Fn<[Ptr, Int32Array, number, number], number>;
  setEndNote: Fn<[Ptr, number, number], number>;
  free: Fn<[Ptr], void>;
  waitForwarding: Fn<[Ptr, number], number>;
  pipe: Fn<[Int32Array], number>;
  socketpair: Fn<[Int32Array], number>;
  openpty: Fn<[Int32Array, number, number], number>;
  ptyResize: Fn<[number, number, number], number>;
  syscallNumber: Fn<[string], number>;
  close: Fn<[number], number>;
  renameExchange: Fn<[string, string], number>;
  isatty: Fn<[number], number>;
  probe: Fn<[string, Record<string, unknown>], number>;
  strerror: Fn<[number], string | null>;
  abiVersion: Fn<[], number>;
  exit: Fn<[number], void>;
}

let anchor: string | undefined;
let anchorIsReal = false;
let root: string | undefined;

/**
 * Says where this package is installed: any file inside it (symlinks allowed). This module is
 * compiled both as CommonJS (the CLI) and as ESM (the library), so it can name neither
 * __dirname nor import.meta: each entry point tells it instead (src/cli/main.ts from the main
 * module's file name, which Node has already resolved, src/index.ts from import.meta.url).
 */
export function setPackageAnchor(file: string, isRealPath = false): void {
  if (file !== anchor) root = coreDir = undefined;
  anchor = file;
  anchorIsReal = isRealPath;
}

/** The package root: the nearest directory above the anchor holding package.json. */
export function packageRoot(): string {
  if (root !== undefined) return root;
  const fail = (why: string) =>
    new SetupError(`cannot find the cvisor package root: ${why}`, "ENOROOT");
  if (anchor === undefined) throw fail("no entry point set it");
  let dir: string;
  try {
    dir = dirname(anchorIsReal ? anchor : realpathSync.native(anchor));
  } catch (err) {
    throw fail(firstLine(err));
  }
  while (!existsSync(join(dir, "package.json"))) {
    const parent = dirname(dir);
    if (parent === dir) throw fail(`no package.json above ${anchor}`);
    dir = parent;
  }
  return (root = dir);
}

let coreDir: string | undefined;

/**
 * Where the package's core is: native/build/ when it was built here (a checkout, or an install
 * that had no prebuilt core for this machine), else the prebuilt one the npm package ships for
 * this platform (native/prebuilt/linux-x64/), which also serves an install made with
 * --ignore-scripts.
 */
export function nativeDir(): string {
  if (coreDir !== undefined) return coreDir;
  const root = packageRoot();
  const built = join(root, "native", "build");
  const prebuilt = join(root, "native", "prebuilt", `${process.platform}-${process.arch}`);
  coreDir =
    !existsSync(join(built, "libcvisor.so")) && existsSync(join(prebuilt, "libcvisor.so"))
      ? prebuilt
      : built;
  return coreDir;
}

/** Path of libcvisor.so: $CVISOR_LIB, else the package's core (nativeDir). */
export function libraryPath(): string {
  return process.env.CVISOR_LIB || join(nativeDir(), "libcvisor.so");
}

/** Path of the cvisor-helper binary: $CVISOR_HELPER, else the package's core (nativeDir). */
export function helperPath(): string {
  return process.env.CVISOR_HELPER || join(nativeDir(), "cvisor-helper");
}

let binding: Binding | undefined;
let typesDeclared = false;

/** Loads the library and declares every function, on first use only. */
function lib(): Binding {
  if (binding) return binding;
  const path = libraryPath();
  const hint = "(build it with: npm run build:native)";
  const koffi = loadKoffi();
  let handle: Koffi.LibraryHandle;
  try {
    handle = koffi.load(path);
  } catch (err) {
    throw new SetupError(`cannot load ${path}: ${firstLine(err)} ${hint}`, "ENATIVE");
  }
  if (!typesDeclared) declareTypes(koffi);
  typesDeclared = true;
  binding = declare(handle, path, koffi);
  const version = binding.abiVersion();
  if (version !== ABI_VERSION) {
    binding = undefined;
    throw new SetupError(
      `${path} has ABI version ${version}, this cvisor needs ${ABI_VERSION} ${hint}`,
      "ENATIVE",
    );
  }
  return binding;
}

/** struct cv_run_result, field by field (a unit test compares it with the header). */
export const RUN_RESULT_LAYOUT: readonly (readonly [string, string])[] = [
  ["state", "int32_t"],
  ["exit_code", "int32_t"],
  ["signal", "int32_t"],
  ["timed_out", "int32_t"],
  ["killed", "int32_t"],
  ["exec_errno", "int32_t"],
  ["error", "int32_t"],
  ["denials", "int32_t"],
  ["duration_ms", "double"],
  ["user_ms", "double"],
  ["system_ms", "double"],
  ["max_rss_kb", "int64_t"],
  ["notifications", "uint64_t"],
  ["message", "char[256]"],
];

/** struct cv_probe_result, field by field (a unit test compares it with the header). */
export const PROBE_RESULT_LAYOUT: readonly (readonly [string, string])[] = [
  "seccomp_unotify",
  "seccomp_errno",
  "addfd_send",
  "addfd_errno",
  "sync_wakeup",
  "killable_recv",
  "pidfd_open",
  "pidfd_getfd",
  "pidfd_errno",
  "landlock_abi",
  "landlock_errno",
  "proc_mem_force",
  "proc_mem_errno",
  "helper_ok",
  "helper_errno",
  "pad_",
].map((name) => [name, "int32_t"] as const);

/**
 * koffi itself. Its JS entry spends ~3.5 ms of start-up (a third of the CLI's budget over
 * `node -e 0`) detecting the platform before it requires its prebuilt native module; on glibc
 * Linux we load that module directly (found the way require would, minus the resolver's own
 * cost), and fall back to the entry for anything else.
 */
function loadKoffi(): typeof Koffi {
  const root = packageRoot();
  if (process.platform === "linux" && (process.arch === "x64" || process.arch === "arm64")) {
    try {
      const prebuilt = findPackage(root, `@koromix/koffi-linux-${process.arch}`);
      if (prebuilt !== undefined) {
        const mod = { exports: {} as typeof Koffi };
        process.dlopen(mod, join(prebuilt, `linux_${process.arch}`, "koffi.node"));
        const native = mod.exports;
        if (typeof native.load === "function") return native;
      }
    } catch {
      // Another layout or libc: the public entry knows.
    }
  }
  // require, even from ESM: koffi's CommonJS entry loads faster than its ESM wrapper. node:module
  // is fetched only here, since loading it pulls in the ESM loader (Node >= 20.16 has this API).
  const modules = process.getBuiltinModule?.("node:module");
  if (!modules) {
    throw new SetupError("cannot load koffi: no prebuilt module found (Node < 20.16)", "ENATIVE");
  }
  return modules.createRequire(join(root, "package.json"))("koffi") as typeof Koffi;
}

/** The directory of package `name` as require would find it from `dir`, or undefined. */
function findPackage(dir: string, name: string): string | undefined {
  for (;;) {
    const candidate = join(dir, "node_modules", name);
    if (existsSync(join(candidate, "package.json"))) return candidate;
    const parent = dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
}

/** koffi struct fields from a layout table. */
function structFields(
  koffi: typeof Koffi,
  layout: readonly (readonly [string, string])[],
): Record<string, string | Koffi.TypeObject> {
  const fields: Record<string, string | Koffi.TypeObject> = {};
  for (const [name, ctype] of layout) {
    // "char[256]" is a C string in an array; every other field is a plain scalar type.
    const open = ctype.indexOf("[");
    const item = open < 0 ? ctype : ctype.slice(0, open);
    const hint = item === "char" ? "String" : "Array";
    fields[name] = open < 0 ? ctype : koffi.array(item, Number(ctype.slice(open + 1, -1)), hint);
  }
  return fields;
}

function declareTypes(koffi: typeof Koffi): void {
  const struct = (layout: readonly (readonly [string, string])[]) => structFields(koffi, layout);
  koffi.opaque("cv_run");
  koffi.struct("cv_run_result", struct(RUN_RESULT_LAYOUT));
}

let probeTypeDeclared = false;

/** struct cv_probe_result, declared only when doctor probes. */
function declareProbeType(koffi: typeof Koffi): void {
  if (probeTypeDeclared) return;
  probeTypeDeclared = true;
  koffi.struct("cv_probe_result", structFields(koffi, PROBE_RESULT_LAYOUT));
}

/** The C prototype of every binding function. */
const PROTOTYPES: Record<keyof Binding, string> = {
  runNew: "cv_run *cv_run_new(const char *helper_path)",
  addArg: "int cv_run_add_arg(cv_run *r, const char *arg)",
  addEnv: "int cv_run_add_env(cv_run *r, const char *kv)",
  setCwd: "int cv_run_set_cwd(cv_run *r, const char *dir)",
  addHiddenList: "int cv_run_add_hidden_list(cv_run *r, const char *paths, size_t len)",
  setStdio: "int cv_run_set_stdio(cv_run *r, int i, int o, int e)",
  setNetwork: "int cv_run_set_network(cv_run *r, int n)",
  setAllowListen: "int cv_run_set_allow_listen(cv_run *r, int a)",
  setTimeoutMs: "int cv_run_set_timeout_ms(cv_run *r, uint32_t ms)",
  setHostname: "int cv_run_set_hostname(cv_run *r, const char *name)",
  setCtty: "int cv_run_set_ctty(cv_run *r)",
  addCgroup: "int cv_run_add_cgroup(cv_run *r, const char *procs_file)",
  watchOomV1: "int cv_run_watch_oom_v1(cv_run *r, const char *memcg_dir)",
  setWatchLimits:
    "int cv_run_set_watch_limits(cv_run *r, uint64_t memory, uint32_t pids, uint32_t cpu_milli)",
  getLimits: "int cv_run_get_limits(cv_run *r, void *out)",
  setDiskLimit: "int cv_run_set_disk_limit(cv_run *r, uint64_t bytes)",
  setUpper: "int cv_run_set_upper(cv_run *r, const char *upper, const char *work)",
  addLower: "int cv_run_add_lower(cv_run *r, const char *layer_dir)",
  start: "int cv_run_start(cv_run *r, _Out_ int *done_fd)",
  kill: "int cv_run_kill(cv_run *r)",
  signal: "int cv_run_signal(cv_run *r, int sig)",
  getResult: "int cv_run_get_result(cv_run *r, _Out_ cv_run_result *out)",
  statsJson: "int cv_run_stats_json(cv_run *r, char *buf, size_t len)",
  addNetRule: "int cv_run_add_net_rule(cv_run *r, const char *addr, int prefix, int lo, int hi)",
  addNetDivert:
    "int cv_run_add_net_divert(cv_run *r, const char *addr, int prefix, int lo, int hi, const char *to, int to_port)",
  setDivertFd: "int cv_run_set_divert_fd(cv_run *r, int fd)",
  setGrantFd: "int cv_run_set_grant_fd(cv_run *r, int fd)",
  resolveHost: "int cv_resolve_host(const char *name, char *out, size_t len)",
  denialsJson: "int cv_run_denials_json(cv_run *r, char *buf, size_t len)",
  allowUnix: "int cv_run_allow_unix(cv_run *r, const char *path)",
  setHook: "int cv_run_set_hook(cv_run *r, const int32_t *nrs, size_t n, int fd)",
  setTrace: "int cv_run_set_trace(cv_run *r, const int32_t *nrs, size_t n, int fd)",
  setEndNote: "int cv_run_set_end_note(cv_run *r, int fd, uint64_t token)",
  free: "void cv_run_free(cv_run *r)",
  waitForwarding: "int cv_run_wait_forwarding(cv_run *r, int interactive)",
  pipe: "int cv_pipe(_Out_ int *fds)",
  socketpair: "int cv_socketpair(_Out_ int *fds)",
  openpty: "int cv_openpty(_Out_ int *fds, uint16_t cols, uint16_t rows)",
  ptyResize: "int cv_pty_resize(int fd, uint16_t cols, uint16_t rows)",
  syscallNumber: "int cv_syscall_number(const char *name)",
  close: "int cv_close(int fd)",
  renameExchange: "int cv_rename_exchange(const char *a, const char *b)",
  isatty: "int cv_isatty(int fd)",
  probe: "int cv_probe(const char *helper_path, _Out_ cv_probe_result *out)",
  strerror: "const char *cv_strerror(int err)",
  abiVersion: "int cv_abi_version(void)",
  // The C library's, found through libcvisor.so's dependencies (see exitNow).
  exit: "void _exit(int status)",
};

/**
 * The binding: each function is declared with koffi on first use — a plain run needs two
 * thirds of them, and every declaration costs start-up time. A missing symbol is reported then.
 */
function declare(h: Koffi.LibraryHandle, path: string, koffi: typeof Koffi): Binding {
  const binding = {} as Binding;
  for (const key of Object.keys(PROTOTYPES) as (keyof Binding)[]) {
    Object.defineProperty(binding, key, {
      configurable: true,
      enumerable: true,
      get(): unknown {
        if (key === "probe") declareProbeType(koffi);
        let fn: unknown;
        try {
          fn = h.func(PROTOTYPES[key]);
        } catch (err) {
          throw new SetupError(
            `${path} is incomplete: ${firstLine(err)} (build it with: npm run build:native)`,
            "ENATIVE",
          );
        }
        Object.defineProperty(binding, key, { value: fn, enumerable: true });
        return fn;
      },
    });
  }
  return binding;
}

function firstLine(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  return text.split("\n")[0] ?? text;
}

/** The name of a positive errno value ("ENOENT"), or "errno N". */
export function errnoName(errno: number): string {
  for (const [name, value] of Object.entries(osConstants.errno)) {
    if (value === errno) return name;
  }
  return `errno ${errno}`;
}

/** The name of a signal number ("SIGKILL"), or "signal N". */
export function signalName(signal: number): string {
  for (const [name, value] of Object.entries(osConstants.signals)) {
    if (value === signal) return name;
  }
  return `signal ${signal}`;
}

/** A short code for a negative return value: the cv_error name or the errno name. */
export function errorCode(rc: number): string {
  return cvErrorName(rc) ?? errnoName(-rc);
}

/** Human text for a negative return value (a cv_error or an -errno), from cv_strerror. */
export function strerror(rc: number): string {
  const name = cvErrorName(rc);
  if (name) return ERROR_TEXT[name];
  return lib().strerror(rc) ?? `error ${rc}`;
}

/** Sentences for the cv_error codes (cv_strerror gives only their names). */
const ERROR_TEXT: Record<keyof typeof CV_ERROR, string> = {
  CV_OK: "no error",
  CV_ERR_NOMEM: "out of memory",
  CV_ERR_INVALID: "invalid argument",
  CV_ERR_STATE: "call not valid in the run's current state",
  CV_ERR_HELPER: "cvisor-helper is missing or not executable (run: npm run build:native)",
  CV_ERR_SPAWN: "could not start cvisor-helper",
  CV_ERR_SECCOMP: "seccomp user notification is unavailable (run: cvisor doctor)",
  CV_ERR_LANDLOCK: "Landlock is unavailable or refused (run: cvisor doctor)",
  CV_ERR_HANDSHAKE: "cvisor-helper died before handing over the seccomp listener",
  CV_ERR_PIDFD: "pidfd_open / pidfd_getfd are unavailable (run: cvisor doctor)",
  CV_ERR_CWD: "the working directory cannot be entered",
};

function check(rc: number, what: string): number {
  if (rc < 0) throw coreError(`${what}: ${strerror(rc)}`, errorCode(rc));
  return rc;
}

/** A cv_run handle; guards against use after cv_run_free (a BigInt pointer has no type). */
export class NativeRun {
  #ptr: Ptr | null;

  /** Use createRun(). */
  constructor(ptr: Ptr) {
    this.#ptr = ptr;
  }

  /** The live pointer, or a CvisorError once freed. */
  get ptr(): Ptr {
    if (this.#ptr === null) throw new UsageError("run already freed", "CV_ERR_STATE");
    return this.#ptr;
  }

  /** True until free(). */
  get alive(): boolean {
    return this.#ptr !== null;
  }

  /** Forget the pointer (free() calls cv_run_free first). */
  release(): void {
    this.#ptr = null;
  }
}

/** cv_run_new and every setter of a RunSpec; frees the run again if a setter fails. */
export function createRun(spec: RunSpec): NativeRun {
  const b = lib();
  const ptr = b.runNew(spec.helperPath);
  if (ptr === null) {
    if (spec.hook !== undefined) close(spec.hook.fd);
    throw new SetupError("cv_run_new: out of memory", "CV_ERR_NOMEM");
  }
  const run = new NativeRun(ptr);
  try {
    if (spec.hook !== undefined) {
      // First: from here the run owns the fd (cv_run_set_hook closes it when it fails).
      const nrs = Int32Array.from(spec.hook.syscalls);
      check(b.setHook(ptr, nrs, nrs.length, spec.hook.fd), "onSyscall hook");
    }
    for (const arg of spec.argv) check(b.addArg(ptr, arg), `argument ${JSON.stringify(arg)}`);
    for (const kv of spec.env) check(b.addEnv(ptr, kv), "environment");
    if (spec.cwd !== undefined) check(b.setCwd(ptr, spec.cwd), `working directory ${spec.cwd}`);
    check(b.setStdio(ptr, spec.stdio[0], spec.stdio[1], spec.stdio[2]), "stdio");
    check(b.setNetwork(ptr, NETWORK[spec.network]), "network policy");
    for (const r of spec.netRules ?? []) {
      const what = `--allow-net ${r.addr}/${r.prefix}:${r.portLo}-${r.portHi}`;
      check(b.addNetRule(ptr, r.addr, r.prefix, r.portLo, r.portHi), what);
    }
    if (spec.divert !== undefined) {
      const { rules, port, fd } = spec.divert;
      for (const r of rules) {
        const what = `--inject ${r.addr}:${r.portLo}`;
        check(b.addNetDivert(ptr, r.addr, r.prefix, r.portLo, r.portHi, "127.0.0.1", port), what);
      }
      check(b.setDivertFd(ptr, fd), "the credential broker");
    }
    if (spec.grantFd !== undefined) check(b.setGrantFd(ptr, spec.grantFd), "the name service");
    check(b.setAllowListen(ptr, LISTEN[spec.listen]), "listen policy");
    check(b.setTimeoutMs(ptr, spec.timeoutMs), "timeout");
    if (spec.hide.length > 0) {
      // One call for the whole list (some sixty paths by default): a call each cost more.
      const list = Buffer.from(`${spec.hide.join("\0")}\0`);
      check(b.addHiddenList(ptr, list, list.length), `hidden paths ${spec.hide.join(", ")}`);
    }
    for (const path of spec.allowUnix ?? []) check(b.allowUnix(ptr, path), `--allow-unix ${path}`);
    if (spec.hostname !== undefined) check(b.setHostname(ptr, spec.hostname), "hostname");
    if (spec.ctty) check(b.setCtty(ptr), "the guest's terminal");
    for (const file of spec.cgroups?.procs ?? []) check(b.addCgroup(ptr, file), `cgroup ${file}`);
    const oom = spec.cgroups?.oomV1;
    if (oom !== undefined) check(b.watchOomV1(ptr, oom), `the OOM events of ${oom}`);
    if (spec.watch !== undefined) {
      const { memoryBytes, pids, cpus } = spec.watch;
      const milli = cpus === undefined ? 0 : Math.max(1, Math.round(cpus * 1000));
      check(b.setWatchLimits(ptr, BigInt(memoryBytes ?? 0), pids ?? 0, milli), "limits");
      const disk = spec.watch.diskBytes;
      if (disk !== undefined) check(b.setDiskLimit(ptr, BigInt(disk)), "disk limit");
    }
    if (spec.upper !== undefined) {
      check(
        b.setUpper(ptr, spec.upper.upper, spec.upper.work),
        `sandbox layer ${spec.upper.upper}`,
      );
    }
    for (const dir of spec.lowers ?? []) check(b.addLower(ptr, dir), `snapshot layer ${dir}`);
    if (spec.trace !== undefined) {
      const nrs = Int32Array.from(spec.trace.syscalls);
      check(b.setTrace(ptr, nrs, nrs.length, spec.trace.fd), "--trace");
    }
  } catch (err) {
    free(run);
    throw err;
  }
  return run;
}

/** cv_run_set_end_note: token goes out on fd (a stream socket) as the run ends. */
export function setEndNote(run: NativeRun, fd: number, token: number): void {
  check(lib().setEndNote(run.ptr, fd, token), "cannot watch the run's end");
}

/** cv_run_start: returns at once with the fd that reaches EOF when the run is over. */
export function start(run: NativeRun): { doneFd: number } {
  const out = [-1];
  check(lib().start(run.ptr, out), "cannot start the sandbox");
  const doneFd = out[0];
  if (doneFd === undefined || doneFd < 0) {
    throw new SetupError("cv_run_start returned no done fd", "CV_ERR_STATE");
  }
  return { doneFd };
}

/**
 * cv_run_wait_forwarding: blocks this thread until the run is over, while SIGTERM and SIGHUP
 * (and SIGINT/SIGQUIT unless `interactive`) kill the tree. For the CLI, whose only job is the
 * run: no event loop turn, no threadpool thread. Returns the signal that killed the run, or 0.
 * The library watches the done fd from the event loop instead.
 */
export function waitForwarding(run: NativeRun, interactive: boolean): number {
  const rc = lib().waitForwarding(run.ptr, interactive ? 1 : 0);
  if (rc < 0) throw new SetupError(`cannot wait for the sandbox: ${strerror(rc)}`, errorCode(rc));
  return rc;
}

/** cv_run_kill: asks for the whole tree to be killed; a no-op once the run is freed. */
export function kill(run: NativeRun): void {
  if (run.alive) check(lib().kill(run.ptr), "cannot kill the sandbox");
}

/** cv_run_signal: sig to the main guest process only (nothing before it runs or after it ended). */
export function signal(run: NativeRun, sig: number): void {
  if (run.alive) check(lib().signal(run.ptr, sig), "cannot signal the guest");
}

/** cv_run_get_result, decoded; valid once the done fd reached EOF. */
export function getResult(run: NativeRun): NativeRunResult {
  const out: Record<string, unknown> = {};
  check(lib().getResult(run.ptr, out), "cannot read the run result");
  const int = (key: string): number => Number(out[key] ?? 0);
  return {
    state: int("state"),
    exitCode: int("exit_code"),
    signal: int("signal"),
    timedOut: int("timed_out") !== 0,
    killed: int("killed") !== 0,
    execErrno: int("exec_errno"),
    error: int("error"),
    durationMs: int("duration_ms"),
    userMs: int("user_ms"),
    systemMs: int("system_ms"),
    maxRssKb: int("max_rss_kb"),
    notifications: int("notifications"),
    denials: int("denials"),
    message: typeof out.message === "string" ? out.message : "",
  };
}

/** cv_run_get_limits, decoded; valid once the run is over. */
export function watchedLimits(run: NativeRun): WatchedLimits {
  const out = Buffer.alloc(32); // struct cv_run_limits
  check(lib().getLimits(run.ptr, out), "cannot read the run's limits");
  const hit = out.readUInt32LE(12);
  return {
    memoryPeak: Number(out.readBigUInt64LE(0)),
    pidsPeak: out.readUInt32LE(8),
    memoryHit: (hit & 1) !== 0,
    pidsHit: (hit & 2) !== 0,
    diskHit: (hit & 4) !== 0,
    cpuMs: Number(out.readBigUInt64LE(16)),
    diskPeak: Number(out.readBigUInt64LE(24)),
  };
}

/** The buffer cv_run_stats_json writes into; reused, since calls are synchronous. */
let statsBuffer: Buffer | undefined;

/** cv_run_stats_json, parsed: notifications per syscall name. */
/**
 * The addresses a host name resolves to on this host (getaddrinfo: /etc/hosts and DNS as its
 * NSS says), or the resolver's sentence why not. Blocks until the resolver answers.
 */
export function resolveHost(name: string): { addrs: string[] } | { error: string } {
  const buf = Buffer.alloc(8192);
  const n = lib().resolveHost(name, buf, buf.length);
  const text = buf.toString("utf8", 0, buf.indexOf(0));
  if (n < 0) return { error: text };
  return { addrs: [...new Set(text.split("\n").filter((a) => a !== ""))] };
}

export function statsJson(run: NativeRun): Record<string, number> {
  let buf = (statsBuffer ??= Buffer.allocUnsafe(64 * 1024));
  for (;;) {
    const need = check(lib().statsJson(run.ptr, buf, buf.length), "cannot read the run statistics");
    if (need < buf.length) return parseStats(buf.toString("utf8", 0, need));
    buf = statsBuffer = Buffer.allocUnsafe(need + 1);
  }
}

function parseStats(text: string): Record<string, number> {
  const stats: Record<string, number> = {};
  if (text.trim() === "") return stats;
  const parsed: unknown = JSON.parse(text);
  if (typeof parsed !== "object" || parsed === null) return stats;
  for (const [name, count] of Object.entries(parsed)) {
    if (typeof count === "number") stats[name] = count;
  }
  return stats;
}

/** A call the supervisor refused: which, what it named, why, how often. */
export interface Denial {
  syscall: string;
  target: string;
  why: string;
  count: number;
  /** The first process refused it, and its name, when known. */
  pid?: number;
  process?: string;
}

/** cv_run_denials_json, parsed. */
export function denials(run: NativeRun): Denial[] {
  let buf = (statsBuffer ??= Buffer.allocUnsafe(64 * 1024));
  for (;;) {
    const need = check(
      lib().denialsJson(run.ptr, buf, buf.length),
      "cannot read the run's denials",
    );
    if (need < buf.length) return parseDenials(buf.toString("utf8", 0, need));
    buf = statsBuffer = Buffer.allocUnsafe(need + 1);
  }
}

function parseDenials(text: string): Denial[] {
  const parsed: unknown = JSON.parse(text);
  if (!Array.isArray(parsed)) return [];
  const out: Denial[] = [];
  for (const item of parsed as unknown[]) {
    if (typeof item !== "object" || item === null) continue;
    const d = item as Record<string, unknown>;
    if (typeof d.syscall !== "string" || typeof d.target !== "string" || typeof d.why !== "string")
      continue;
    const { syscall, target, why } = d;
    const who =
      typeof d.pid === "number" && typeof d.process === "string"
        ? { pid: d.pid, process: d.process }
        : {};
    out.push({ syscall, target, why, count: Number(d.count) || 1, ...who });
  }
  return out;
}

/** cv_run_free (kills a run that is still going); idempotent. */
export function free(run: NativeRun): void {
  if (!run.alive) return;
  const ptr = run.ptr;
  run.release();
  lib().free(ptr);
}

/** cv_pipe: [read end, write end], both close-on-exec (Node has no pipe(2)). */
export function pipe(): [number, number] {
  const fds = new Int32Array([-1, -1]);
  check(lib().pipe(fds), "cannot create a pipe");
  return [fds[0] ?? -1, fds[1] ?? -1];
}

/** cv_socketpair: a connected pair of stream sockets, both close-on-exec. */
export function socketpair(): [number, number] {
  const fds = new Int32Array([-1, -1]);
  check(lib().socketpair(fds), "cannot create a socket pair");
  return [fds[0] ?? -1, fds[1] ?? -1];
}

/** cv_openpty: a new pseudo-terminal of cols x rows, [master, slave], both close-on-exec. */
export function openpty(cols: number, rows: number): [number, number] {
  const fds = new Int32Array([-1, -1]);
  check(lib().openpty(fds, clampSize(cols, 80), clampSize(rows, 24)), "cannot open a pty");
  return [fds[0] ?? -1, fds[1] ?? -1];
}

/** cv_pty_resize: the window size of the pty whose master is fd (the guest gets SIGWINCH). */
export function ptyResize(fd: number, cols: number, rows: number): void {
  check(lib().ptyResize(fd, clampSize(cols, 80), clampSize(rows, 24)), "cannot resize the pty");
}

function clampSize(n: number, fallback: number): number {
  return Number.isInteger(n) && n > 0 ? Math.min(n, 0xffff) : fallback;
}

/** The number of a syscall the filter table knows ("openat" → 257), or undefined. */
export function syscallNumber(name: string): number | undefined {
  const nr = lib().syscallNumber(name);
  return nr >= 0 ? nr : undefined;
}

/** cv_close: close(2) for an fd no Node object owns. */
export function close(fd: number): void {
  check(lib().close(fd), `cannot close fd ${fd}`);
}

/**
 * cv_rename_exchange: swaps the objects at paths a and b at once (Node has no renameat2).
 * Throws an Error with the errno's `code` (ENOENT, EXDEV, ...), as node:fs does.
 */
export function renameExchange(a: string, b: string): void {
  const rc = lib().renameExchange(a, b);
  if (rc === 0) return;
  const code = Object.entries(osConstants.errno).find(([, n]) => n === -rc)?.[0] ?? cvErrorName(rc);
  throw Object.assign(new Error(`${code}: cannot exchange '${a}' and '${b}'`), { code });
}

/** cv_isatty: isatty(3), without loading node:tty to ask. */
export function isatty(fd: number): boolean {
  return lib().isatty(fd) === 1;
}

/** cv_probe: tries each kernel feature for real (for `cvisor doctor`). */
export function probe(helper: string = helperPath()): ProbeResult {
  const out: Record<string, unknown> = {};
  check(lib().probe(helper, out), "feature probe failed");
  const int = (key: string): number => Math.abs(Number(out[key] ?? 0));
  const yes = (key: string): boolean => int(key) !== 0;
  return {
    seccompUnotify: yes("seccomp_unotify"),
    seccompErrno: int("seccomp_errno"),
    addfdSend: yes("addfd_send"),
    addfdErrno: int("addfd_errno"),
    syncWakeup: yes("sync_wakeup"),
    killableRecv: yes("killable_recv"),
    pidfdOpen: yes("pidfd_open"),
    pidfdGetfd: yes("pidfd_getfd"),
    pidfdErrno: int("pidfd_errno"),
    landlockAbi: int("landlock_abi"),
    landlockErrno: int("landlock_errno"),
    procMemForce: yes("proc_mem_force"),
    procMemErrno: int("proc_mem_errno"),
    helperOk: yes("helper_ok"),
    helperErrno: int("helper_errno"),
  };
}

/**
 * Ends this process at once with `code`: _exit(2), which skips Node's teardown of the heap and
 * the platform (about 0.7 ms of `cvisor -- true`). Only for a caller whose output is all
 * written synchronously and that holds nothing to clean up. It exits the usual way when anything
 * may wait for the exit: an "exit" listener (the bin writing its code cache), or Node options
 * (--cpu-prof and the like write their files then; NODE_V8_COVERAGE too).
 */
export function exitNow(code: number): never {
  const env = process.env;
  const plain = process.execArgv.length === 0 && !env.NODE_OPTIONS && !env.NODE_V8_COVERAGE;
  if (plain && process.listenerCount("exit") === 0) {
    try {
      lib().exit(code);
    } catch {
      // No library (the run failed loading it): the usual way.
    }
  }
  process.exit(code);
}

/** cv_abi_version of the loaded library. */
export function abiVersion(): number {
  return lib().abiVersion();
}
