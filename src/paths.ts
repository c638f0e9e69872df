// Where cvisor keeps its files. The only module allowed to read the home and temp
// directories (an eslint rule enforces it), so tests can redirect everything with env vars.
import { homedir } from "node:os";
import { isAbsolute, join } from "node:path";

/** The state directory: $CVISOR_HOME, else ${XDG_DATA_HOME:-~/.local/share}/cvisor. */
export function cvisorHome(env: NodeJS.ProcessEnv = process.env): string {
  if (env.CVISOR_HOME) return env.CVISOR_HOME;
  const xdg = env.XDG_DATA_HOME;
  // The XDG spec says a relative path is invalid and must be ignored.
  const dataHome = xdg && isAbsolute(xdg) ? xdg : join(homedir(), ".local", "share");
  return join(dataHome, "cvisor");
}

/** Credentials a guest must not read by default, under the user's home. */
export const CREDENTIAL_PATHS: readonly string[] = [
  ".ssh",
  ".aws",
  ".config/gcloud",
  ".docker",
  ".kube",
  ".netrc",
  ".npmrc",
  ".git-credentials",
];

/**
 * What a guest must not read unless exposed: the credentials in $HOME (else the account's home)
 * and cvisor's own state directory (other sandboxes' files, caches).
 */
export function defaultHiddenPaths(env: NodeJS.ProcessEnv = process.env): string[] {
  const home = (env.HOME && isAbsolute(env.HOME) ? env.HOME : homedir()).replace(/\/+$/, "");
  // Plain concatenation: this runs at every `cvisor -- CMD`, and path.join costs start-up time.
  return [...CREDENTIAL_PATHS.map((rel) => `${home}/${rel}`), cvisorHome(env)];
}

/**
 * Where ephemeral sandboxes may live, in order of preference: $XDG_RUNTIME_DIR/cvisor (when
 * set and absolute), then <system temp dir>/cvisor-<uid>. The store takes the first one it can
 * use (src/sandbox/ephemeral.ts).
 */
export function ephemeralRootCandidates(env: NodeJS.ProcessEnv = process.env): string[] {
  // Plain string work, no regex or path module: this runs at every `cvisor -- CMD`.
  const trim = (dir: string): string => {
    let end = dir.length;
    while (end > 0 && dir[end - 1] === "/") end--;
    return dir.slice(0, end);
  };
  const candidates: string[] = [];
  const xdg = env.XDG_RUNTIME_DIR;
  if (xdg && xdg[0] === "/") candidates.push(`${trim(xdg)}/cvisor`);
  // What os.tmpdir() returns, read from `env` (and without its first-call cost on the run path).
  const tmp = env.TMPDIR || env.TMP || env.TEMP || "/tmp";
  candidates.push(`${tmp[0] === "/" ? trim(tmp) : "/tmp"}/cvisor-${process.getuid?.() ?? 0}`);
  return candidates;
}
