import assert from "node:assert/strict";
import { test } from "node:test";
import { CvisorError } from "../../src/core/errors.js";
import { FALLBACK_PATH, buildEnv, envStrings } from "../../src/sandbox/env.js";

const host = {
  PATH: "/host/bin",
  HOME: "/home/u",
  LANG: "C.UTF-8",
  LC_ALL: "C",
  LC_TIME: "en_GB.UTF-8",
  AWS_SECRET_ACCESS_KEY: "secret",
  GITHUB_TOKEN: "token",
  SSH_AUTH_SOCK: "/tmp/agent",
  UNSET: undefined,
};

test("only the harmless host variables pass by default", () => {
  assert.deepEqual(buildEnv(host), {
    PATH: "/host/bin",
    HOME: "/home/u",
    LANG: "C.UTF-8",
    LC_ALL: "C",
    LC_TIME: "en_GB.UTF-8",
    CVISOR_SANDBOX: "cvisor",
  });
});

test("the guest is told it runs in a sandbox, whatever the host says", () => {
  assert.equal(buildEnv({ ...host, CVISOR_SANDBOX: "host-value" }).CVISOR_SANDBOX, "cvisor");
});

test("PATH falls back when the host has none", () => {
  assert.equal(buildEnv({}).PATH, FALLBACK_PATH);
});

test("layers apply in order and undefined removes", () => {
  const env = buildEnv(host, { A: "sandbox", B: "sandbox" }, { B: "run", HOME: undefined });
  assert.equal(env.A, "sandbox");
  assert.equal(env.B, "run");
  assert.equal("HOME" in env, false);
  assert.equal(env.PATH, "/host/bin");
});

test("envStrings gives KEY=VALUE and refuses bad names", () => {
  assert.deepEqual(envStrings({ A: "1", B: "x=y" }), ["A=1", "B=x=y"]);
  assert.throws(() => envStrings({ "A=B": "1" }), CvisorError);
  assert.throws(() => envStrings({ "": "1" }), CvisorError);
});
