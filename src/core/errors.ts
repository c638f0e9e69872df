// Errors of cvisor itself (never the guest's): the C enum mirrored, and the error class.

/** enum cv_error of native/include/cvisor.h, name for name and value for value (a unit test checks). */
export const CV_ERROR = {
  CV_OK: 0,
  CV_ERR_NOMEM: -1001,
  CV_ERR_INVALID: -1002,
  CV_ERR_STATE: -1003,
  CV_ERR_HELPER: -1004,
  CV_ERR_SPAWN: -1005,
  CV_ERR_SECCOMP: -1006,
  CV_ERR_LANDLOCK: -1007,
  CV_ERR_HANDSHAKE: -1008,
  CV_ERR_PIDFD: -1009,
  CV_ERR_CWD: -1010,
} as const;

/** One of the names of CV_ERROR. */
export type CvErrorName = keyof typeof CV_ERROR;

/** The name of a cv_error value ("CV_ERR_HELPER"), or undefined when it is not one (an -errno). */
export function cvErrorName(code: number): CvErrorName | undefined {
  for (const [name, value] of Object.entries(CV_ERROR)) {
    if (value === code) return name as CvErrorName;
  }
  return undefined;
}

/**
 * What kind of failure of cvisor itself an error is: the closed vocabulary. Each kind is a class
 * below; programs tell them apart with instanceof or `kind`, people by the message.
 *  - usage: bad input (an argument, option, name or value), or a call the library refuses;
 *  - not-found: what the input names is not there (a sandbox, a snapshot, a path, an entry);
 *  - conflict: it is there already, or busy (a run, another command holds it);
 *  - store: cvisor's own state is damaged, or made by a newer cvisor;
 *  - cache: a cache backend or archive failed (I/O, a damaged or hostile archive);
 *  - copy: copying files in or out failed part way (nothing was changed);
 *  - setup: this host or install cannot run sandboxes (the core, the kernel, the state dir);
 *  - aborted: the caller's AbortSignal stopped it (nothing was changed).
 */
export type ErrorKind =
  | "usage"
  | "not-found"
  | "conflict"
  | "store"
  | "cache"
  | "copy"
  | "setup"
  | "aborted"
  | "internal";

/** Options of every CvisorError. */
export interface ErrorOptions {
  cause?: unknown;
}

/**
 * Thrown (or rejected) when cvisor itself failed, never for the guest's own failure. exitCode is
 * what the CLI exits with (125 for every kind, like `docker run`); `code` is the detail a
 * program may test: an errno name such as "ENOENT", a core error such as "CV_ERR_HELPER", or a
 * cvisor one such as "ENOSANDBOX". Thrown as this base class only for what should not happen.
 */
export class CvisorError extends Error {
  readonly kind: ErrorKind = "internal";
  readonly code: string;
  readonly exitCode: number = 125;

  constructor(message: string, code = "CVISOR", options?: ErrorOptions) {
    super(message, options);
    this.name = "CvisorError";
    this.code = code;
  }
}

/** The same failure (its kind and code) said with another message, such as a command's prefix. */
export function restated(err: CvisorError, message: string): CvisorError {
  const Kind = err.constructor as new (m: string, c: string, o?: ErrorOptions) => CvisorError;
  return new Kind(message, err.code, { cause: err });
}

/** Bad input, or a call the library refuses. */
export class UsageError extends CvisorError {
  override readonly kind = "usage";
  constructor(message: string, code = "EUSAGE", options?: ErrorOptions) {
    super(message, code, options);
    this.name = "UsageError";
  }
}

/** What the input names is not there. */
export class NotFoundError extends CvisorError {
  override readonly kind = "not-found";
  constructor(message: string, code = "ENOENT", options?: ErrorOptions) {
    super(message, code, options);
    this.name = "NotFoundError";
  }
}

/** It is there already, or busy. */
export class ConflictError extends CvisorError {
  override readonly kind = "conflict";
  constructor(message: string, code = "EEXIST", options?: ErrorOptions) {
    super(message, code, options);
    this.name = "ConflictError";
  }
}

/** cvisor's own state is damaged, or was made by a newer cvisor. */
export class StoreError extends CvisorError {
  override readonly kind = "store";
  constructor(message: string, code = "ESTORE", options?: ErrorOptions) {
    super(message, code, options);
    this.name = "StoreError";
  }
}

/** A cache backend or archive failed. */
export class CacheError extends CvisorError {
  override readonly kind = "cache";
  constructor(message: string, code = "ECACHE", options?: ErrorOptions) {
    super(message, code, options);
    this.name = "CacheError";
  }
}

/** Copying files in or out failed part way. */
export class CopyError extends CvisorError {
  override readonly kind = "copy";
  constructor(message: string, code = "ECP", options?: ErrorOptions) {
    super(message, code, options);
    this.name = "CopyError";
  }
}

/** This host or install cannot run sandboxes. */
export class SetupError extends CvisorError {
  override readonly kind = "setup";
  constructor(message: string, code = "ESETUP", options?: ErrorOptions) {
    super(message, code, options);
    this.name = "SetupError";
  }
}

/**
 * The caller's AbortSignal stopped the operation; what it had begun was undone. `name` is
 * "AbortError" as for Node's own aborted calls; `cause` is the signal's reason.
 */
export class AbortedError extends CvisorError {
  override readonly kind = "aborted";
  override readonly exitCode: number = 130;
  constructor(message: string, options?: ErrorOptions) {
    super(message, "ABORT_ERR", options);
    this.name = "AbortError";
  }
}

/**
 * The error for a failure the core reported (code: a CV_ERROR name or an errno name): bad input
 * the core refused (CV_ERR_INVALID, a misuse: CV_ERR_STATE), a working directory that is not
 * there (CV_ERR_CWD), else this host cannot run the sandbox.
 */
export function coreError(message: string, code: string, options?: ErrorOptions): CvisorError {
  if (code === "CV_ERR_INVALID" || code === "CV_ERR_STATE") {
    return new UsageError(message, code, options);
  }
  if (code === "CV_ERR_CWD") return new NotFoundError(message, code, options);
  return new SetupError(message, code, options);
}
