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

/** Thrown (or rejected) when cvisor itself failed; exitCode is what the CLI exits with. */
export class CvisorError extends Error {
  /** "CV_ERR_HELPER", an errno name such as "ENOENT", or a cvisor-level code such as "EINVALID_DURATION". */
  readonly code: string;
  /** The CLI's exit code for this failure: 125, like `docker run`. */
  readonly exitCode: number = 125;

  constructor(message: string, code = "CVISOR", options?: { cause?: unknown }) {
    super(message, options);
    this.name = "CvisorError";
    this.code = code;
  }
}
