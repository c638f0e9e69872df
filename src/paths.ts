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

/** Where a credential store lives: $HOME, or an XDG base directory (its default under $HOME). */
type Base = "home" | "config" | "data";

/** One credential store a guest must not read by default (README, "What a guest sees"). */
export interface CredentialStore {
  /** Relative to its base. */
  path: string;
  base: Base;
  /** Whose store it is, for doctor and the docs. */
  what: string;
}

const store = (base: Base, what: string, ...paths: string[]): CredentialStore[] =>
  paths.map((path) => ({ path, base, what }));

/** The credential stores of common tools, hidden unless --expose gives one back. */
export const CREDENTIAL_STORES: readonly CredentialStore[] = [
  ...store("home", "ssh", ".ssh"),
  ...store("home", "gpg", ".gnupg"),
  ...store("home", "password store", ".password-store"),
  ...store("data", "keyrings", "keyrings"),
  ...store("home", "aws", ".aws"),
  ...store("config", "gcloud", "gcloud"),
  ...store("home", "azure", ".azure"),
  ...store("config", "doctl", "doctl"),
  ...store("home", "oci", ".oci"),
  ...store("home", "kubernetes", ".kube"),
  ...store("home", "docker", ".docker"),
  ...store("config", "podman", "containers/auth.json"),
  ...store("home", "terraform", ".terraform.d/credentials.tfrc.json"),
  ...store("home", "vault", ".vault-token"),
  ...store("config", "gh", "gh"),
  ...store("config", "glab", "glab-cli"),
  ...store("config", "hub", "hub"),
  ...store("home", "git", ".git-credentials"),
  ...store("config", "git", "git/credentials"),
  ...store("home", "netrc", ".netrc"),
  ...store("home", "npm", ".npmrc"),
  ...store("home", "yarn", ".yarnrc.yml"),
  ...store("home", "pypi", ".pypirc"),
  ...store("config", "pip", "pip/pip.conf"),
  ...store("home", "cargo", ".cargo/credentials.toml", ".cargo/credentials"),
  ...store("home", "gem", ".gem/credentials"),
  ...store("home", "maven", ".m2/settings.xml", ".m2/settings-security.xml"),
  ...store("home", "gradle", ".gradle/gradle.properties"),
  ...store("config", "nuget", "NuGet/NuGet.Config"),
  ...store("home", "nuget", ".nuget/NuGet/NuGet.Config"),
  ...store("config", "composer", "composer/auth.json"),
  ...store("home", "composer", ".composer/auth.json"),
  ...store("home", "firefox", ".mozilla"),
  ...store("config", "chrome", "google-chrome", "chromium", "BraveSoftware", "microsoft-edge"),
  ...store(
    "home",
    "shell and REPL histories",
    ".bash_history",
    ".zsh_history",
    ".zhistory",
    ".python_history",
    ".node_repl_history",
    ".psql_history",
    ".mysql_history",
    ".sqlite_history",
    ".rediscli_history",
    ".irb_history",
  ),
  ...store("data", "fish history", "fish/fish_history"),
  ...store("home", "claude", ".claude", ".claude.json"),
  ...store("home", "codex", ".codex"),
  ...store("home", "gemini", ".gemini"),
  ...store("config", "github copilot", "github-copilot"),
];

/** An absolute XDG directory from the environment, else its default under home. */
function xdg(value: string | undefined, home: string, fallback: string): string {
  return value && value[0] === "/" ? trimSlashes(value) : `${home}/${fallback}`;
}

/** The user's home: an absolute $HOME, else the account's (no trailing slash). */
export function userHome(env: NodeJS.ProcessEnv = process.env): string {
  return trimSlashes(env.HOME && env.HOME[0] === "/" ? env.HOME : homedir());
}

/** The credential stores' absolute paths here ($HOME, $XDG_CONFIG_HOME, $XDG_DATA_HOME). */
export function credentialPaths(env: NodeJS.ProcessEnv = process.env): string[] {
  const home = userHome(env);
  const bases: Record<Base, string> = {
    home,
    config: xdg(env.XDG_CONFIG_HOME, home, ".config"),
    data: xdg(env.XDG_DATA_HOME, home, ".local/share"),
  };
  // Plain concatenation: this runs at every `cvisor -- CMD`, and path.join costs start-up time.
  return CREDENTIAL_STORES.map((c) => `${bases[c.base]}/${c.path}`);
}

/**
 * What a guest must not read unless exposed: the credential stores of common tools (in $HOME and
 * the XDG directories) and cvisor's own state directory (other sandboxes' files, caches).
 */
export function defaultHiddenPaths(env: NodeJS.ProcessEnv = process.env): string[] {
  // Every run asks: the same environment gives the same list (a copy: callers may change it).
  const key = `${env.HOME ?? ""}\0${env.XDG_CONFIG_HOME ?? ""}\0${env.XDG_DATA_HOME ?? ""}\0${env.CVISOR_HOME ?? ""}`;
  if (hiddenMemo?.key !== key)
    hiddenMemo = { key, paths: [...credentialPaths(env), cvisorHome(env)] };
  return [...hiddenMemo.paths];
}

let hiddenMemo: { key: string; paths: string[] } | undefined;

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
