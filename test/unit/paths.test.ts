import assert from "node:assert/strict";
import { test } from "node:test";
import { cvisorHome, defaultHiddenPaths, ephemeralRootCandidates } from "../../src/paths.js";

test("CVISOR_HOME wins", () => {
  assert.equal(cvisorHome({ CVISOR_HOME: "/state", XDG_DATA_HOME: "/xdg" }), "/state");
});

test("XDG_DATA_HOME when absolute, else ~/.local/share", () => {
  assert.equal(cvisorHome({ XDG_DATA_HOME: "/xdg" }), "/xdg/cvisor");
  assert.match(cvisorHome({ XDG_DATA_HOME: "relative/dir" }), /\/\.local\/share\/cvisor$/);
  assert.match(cvisorHome({}), /^\/.*\/\.local\/share\/cvisor$/);
});

test("defaultHiddenPaths: the credentials under $HOME and the state directory", () => {
  const hidden = defaultHiddenPaths({ HOME: "/h/", CVISOR_HOME: "/state" });
  assert.deepEqual(hidden, [
    "/h/.ssh",
    "/h/.aws",
    "/h/.config/gcloud",
    "/h/.docker",
    "/h/.kube",
    "/h/.netrc",
    "/h/.npmrc",
    "/h/.git-credentials",
    "/state",
  ]);
});

test("ephemeralRootCandidates: cvisor's state directory, never /tmp or $XDG_RUNTIME_DIR", () => {
  assert.deepEqual(
    ephemeralRootCandidates({ CVISOR_HOME: "/s", XDG_RUNTIME_DIR: "/run/user/7", TMPDIR: "/t" }),
    ["/s"],
  );
  assert.deepEqual(ephemeralRootCandidates({ XDG_DATA_HOME: "/d" }), ["/d/cvisor"]);
});
