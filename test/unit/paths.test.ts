import assert from "node:assert/strict";
import { test } from "node:test";
import { cvisorHome, runtimeDir } from "../../src/paths.js";

test("CVISOR_HOME wins", () => {
  assert.equal(cvisorHome({ CVISOR_HOME: "/state", XDG_DATA_HOME: "/xdg" }), "/state");
});

test("XDG_DATA_HOME when absolute, else ~/.local/share", () => {
  assert.equal(cvisorHome({ XDG_DATA_HOME: "/xdg" }), "/xdg/cvisor");
  assert.match(cvisorHome({ XDG_DATA_HOME: "relative/dir" }), /\/\.local\/share\/cvisor$/);
  assert.match(cvisorHome({}), /^\/.*\/\.local\/share\/cvisor$/);
});

test("runtimeDir: XDG_RUNTIME_DIR when absolute, else the temp dir", () => {
  assert.equal(runtimeDir({ XDG_RUNTIME_DIR: "/run/user/1000" }), "/run/user/1000/cvisor");
  assert.match(runtimeDir({ XDG_RUNTIME_DIR: "rel" }), /\/cvisor-\d+$/);
});
