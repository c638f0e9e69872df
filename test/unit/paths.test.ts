import assert from "node:assert/strict";
import { test } from "node:test";
import { cvisorHome, defaultHiddenPaths } from "../../src/paths.js";

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
