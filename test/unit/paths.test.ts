import assert from "node:assert/strict";
import { test } from "node:test";
import { readFileSync } from "node:fs";
import {
  CREDENTIAL_STORES,
  credentialPaths,
  cvisorHome,
  defaultHiddenPaths,
  ephemeralRootCandidates,
} from "../../src/paths.js";

test("CVISOR_HOME wins", () => {
  assert.equal(cvisorHome({ CVISOR_HOME: "/state", XDG_DATA_HOME: "/xdg" }), "/state");
});

test("XDG_DATA_HOME when absolute, else ~/.local/share", () => {
  assert.equal(cvisorHome({ XDG_DATA_HOME: "/xdg" }), "/xdg/cvisor");
  assert.match(cvisorHome({ XDG_DATA_HOME: "relative/dir" }), /\/\.local\/share\/cvisor$/);
  assert.match(cvisorHome({}), /^\/.*\/\.local\/share\/cvisor$/);
});

test("defaultHiddenPaths: the credential stores in $HOME and XDG dirs, then the state directory", () => {
  const hidden = defaultHiddenPaths({ HOME: "/h/", CVISOR_HOME: "/state" });
  assert.equal(hidden.length, CREDENTIAL_STORES.length + 1);
  assert.equal(hidden.at(-1), "/state");
  for (const p of [
    "/h/.ssh",
    "/h/.gnupg",
    "/h/.aws",
    "/h/.config/gcloud",
    "/h/.config/gh",
    "/h/.kube",
    "/h/.docker",
    "/h/.netrc",
    "/h/.npmrc",
    "/h/.pypirc",
    "/h/.cargo/credentials.toml",
    "/h/.git-credentials",
    "/h/.bash_history",
    "/h/.local/share/keyrings",
    "/h/.local/share/fish/fish_history",
    "/h/.claude",
    "/h/.codex",
    "/h/.mozilla",
    "/h/.config/google-chrome",
  ])
    assert.ok(hidden.includes(p), `${p} is not hidden by default`);
  assert.equal(new Set(hidden).size, hidden.length, "a path is listed twice");
});

test("credentialPaths honours absolute XDG_CONFIG_HOME and XDG_DATA_HOME, ignores relative ones", () => {
  const xdg = credentialPaths({ HOME: "/h", XDG_CONFIG_HOME: "/cfg/", XDG_DATA_HOME: "/data" });
  assert.ok(xdg.includes("/cfg/gh") && xdg.includes("/cfg/gcloud"));
  assert.ok(xdg.includes("/data/keyrings") && xdg.includes("/data/fish/fish_history"));
  assert.ok(xdg.includes("/h/.ssh"));
  const relative = credentialPaths({ HOME: "/h", XDG_CONFIG_HOME: "cfg" });
  assert.ok(relative.includes("/h/.config/gh"));
});

test("README lists every credential store hidden by default", () => {
  const readme = readFileSync(new URL("../../../README.md", import.meta.url), "utf8");
  for (const c of CREDENTIAL_STORES) {
    const shown =
      c.base === "home"
        ? `~/${c.path}`
        : c.base === "config"
          ? `~/.config/${c.path}`
          : `~/.local/share/${c.path}`;
    assert.ok(readme.includes(shown), `README does not name ${shown}`);
  }
});

test("ephemeralRootCandidates: cvisor's state directory, never /tmp or $XDG_RUNTIME_DIR", () => {
  assert.deepEqual(
    ephemeralRootCandidates({ CVISOR_HOME: "/s", XDG_RUNTIME_DIR: "/run/user/7", TMPDIR: "/t" }),
    ["/s"],
  );
  assert.deepEqual(ephemeralRootCandidates({ XDG_DATA_HOME: "/d" }), ["/d/cvisor"]);
});
