// Where cvisor keeps its files. The only module allowed to read the home and temp
// directories (an eslint rule enforces it), so tests can redirect everything with env vars.
import { homedir } from "node:os";

/** The state directory: $CVISOR_HOME, else ${XDG_DATA_HOME:-~/.local/share}/cvisor. */
export function cvisorHome(env: NodeJS.ProcessEnv = process.env): string {
  if (env.CVISOR_HOME) return env.CVISOR_HOME;
  const xdg = env.XDG_DATA_HOME;
  // The XDG spec says a relative path is invalid and must be ignored. String work, not
  // path.join: this runs at every `cvisor -- CMD`.
  const home = env.HOME && env.HOME[0] === "/" ? env.HOME : homedir();
  const dataHome = xdg && xdg[0] === "/" ? xdg : `${trimSlashes(home)}/.local/share`;
  return `${trimSlashes(dataHome)}/cvisor`;
}

/**
 * The default disk cache (`cvisor cache --cache-backend disk`): $CVISOR_CACHE_DIR, else
 * $CVISOR_HOME/cache (inside the state directory, so guests never see it by default).
 */
export function cacheDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.CVISOR_CACHE_DIR) return env.CVISOR_CACHE_DIR;
  return `${cvisorHome(env)}/cache`;
}

/** A path without trailing slashes ("/" stays "", which callers join as "/x"). */
function trimSlashes(dir: string): string {
  let end = dir.length;
  while (end > 0 && dir[end - 1] === "/") end--;
  return dir.slice(0, end);
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
  const home = trimSlashes(env.HOME && env.HOME[0] === "/" ? env.HOME : homedir());
  // Plain concatenation: this runs at every `cvisor -- CMD`, and path.join costs start-up time.
  return [...CREDENTIAL_PATHS.map((rel) => `${home}/${rel}`), cvisorHome(env)];
}

/**
 * Where ephemeral sandboxes live: cvisor's state directory (ephemeral/ under it, next to
 * sandboxes/). Not $XDG_RUNTIME_DIR or the temp dir: the storage is hidden from guests, and
 * Landlock hides a path by granting each of its parent's other entries one by one, so the
 * parent of the hidden storage must be a directory where nothing else appears during a run (an
 * entry made in /tmp after the sandbox started would be unreadable to the guest). The state
 * directory is hidden anyway. Returns the candidates in order (src/sandbox/ephemeral.ts).
 */
export function ephemeralRootCandidates(env: NodeJS.ProcessEnv = process.env): string[] {
  return [cvisorHome(env)];
}
