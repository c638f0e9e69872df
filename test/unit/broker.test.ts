// The credential broker's rules as a user writes them (--secret, --inject), where a secret is
// read from, and the certificates it makes, checked by OpenSSL itself (strict X.509 checks).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tempRoot } from "../helpers/repo.js";
import { join } from "node:path";
import { test } from "node:test";
import {
  parseHttpRule,
  parseInject,
  parseSecret,
  placeholder,
  readSecret,
} from "../../src/sandbox/broker/broker.js";
import { requestAllowed } from "../../src/sandbox/broker/config.js";
import { makeCa, makeServerCert } from "../../src/sandbox/broker/x509.js";

test("--inject: host, port (443 by default), header and its value", () => {
  assert.deepEqual(parseInject("api.example.com Authorization: Bearer {API_KEY}"), {
    host: "api.example.com",
    port: 443,
    tls: true,
    header: "Authorization",
    template: "Bearer {API_KEY}",
  });
  assert.deepEqual(parseInject("API.test:8443 X-Api-Key:{K}"), {
    host: "api.test",
    port: 8443,
    tls: true,
    header: "X-Api-Key",
    template: "{K}",
  });
  assert.deepEqual(parseInject("http://dev.test X: y"), {
    host: "dev.test",
    port: 80,
    tls: false,
    header: "X",
    template: "y",
  });
  assert.equal(parseInject("HTTPS://dev.test:8443 X: y").port, 8443);
  for (const [text, why] of [
    ["api.test", /use 'HOST\[:PORT\] Header-Name: value'/],
    ["10.0.0.1 X: y", /is not a host name/],
    ["api.test:0 X: y", /0 is not a port/],
    ["api.test:70000 X: y", /70000 is not a port/],
    ["*.api.test X: y", /is not a host name/],
    ["api.test X(1): y", /is not a header name/],
  ] as const) {
    assert.throws(() => parseInject(text), why, text);
  }
});

test("--secret: NAME=env:VAR or NAME=file:PATH, read when the run starts", () => {
  assert.deepEqual(parseSecret("API_KEY=env:TOKEN"), { name: "API_KEY", source: { env: "TOKEN" } });
  assert.deepEqual(parseSecret("K=file:/run/k=v"), { name: "K", source: { file: "/run/k=v" } });
  for (const bad of ["API_KEY", "API_KEY=TOKEN", "1K=env:X", "K-1=env:X", "K=env:"]) {
    assert.throws(() => parseSecret(bad), /invalid --secret/, bad);
  }
  assert.deepEqual(readSecret("K", { env: "T" }, { T: "v1" }), { name: "K", value: "v1" });
  assert.deepEqual(readSecret("K", "literal"), { name: "K", value: "literal" });
  const dir = mkdtempSync(join(tempRoot(), "cvisor-unit-secret-"));
  try {
    writeFileSync(join(dir, "k"), "from-file\n");
    assert.deepEqual(readSecret("K", { file: join(dir, "k") }), { name: "K", value: "from-file" });
    writeFileSync(join(dir, "two"), "a\nb\n");
    assert.throws(() => readSecret("K", { file: join(dir, "two") }), /cannot hold a line break/);
    assert.throws(() => readSecret("K", { file: join(dir, "none") }), /cannot read .*: ENOENT/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  assert.throws(() => readSecret("K", { env: "T" }, {}), /\$T is empty or not set/);
  assert.throws(() => readSecret("K", ""), /its value is empty or not set/);
  assert.equal(placeholder("API_KEY"), "cvisor-secret-placeholder-API_KEY");
});

test("the run's CA and a server certificate pass OpenSSL's strict verification", () => {
  const dir = mkdtempSync(join(tempRoot(), "cvisor-unit-x509-"));
  try {
    const ca = makeCa("cvisor unit CA");
    const server = makeServerCert(ca, "cvisor unit CA", "api.example.com");
    writeFileSync(join(dir, "ca.pem"), ca.cert);
    writeFileSync(join(dir, "server.pem"), server.cert);
    const verify = (...args: string[]): string =>
      execFileSync("openssl", ["verify", "-x509_strict", ...args], {
        encoding: "utf8",
        stdio: ["ignore", "pipe", "pipe"],
      });
    assert.match(
      verify(
        "-CAfile",
        join(dir, "ca.pem"),
        "-verify_hostname",
        "api.example.com",
        join(dir, "server.pem"),
      ),
      /: OK/,
    );
    // Another name, or another CA: refused.
    assert.throws(() =>
      verify(
        "-CAfile",
        join(dir, "ca.pem"),
        "-verify_hostname",
        "evil.example.com",
        join(dir, "server.pem"),
      ),
    );
    writeFileSync(join(dir, "other.pem"), makeCa("cvisor unit CA").cert);
    assert.throws(() => verify("-CAfile", join(dir, "other.pem"), join(dir, "server.pem")));
    const text = execFileSync("openssl", ["x509", "-in", join(dir, "ca.pem"), "-noout", "-text"], {
      encoding: "utf8",
    });
    assert.match(text, /CA:TRUE, pathlen:0/);
    assert.match(text, /Certificate Sign, CRL Sign/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("--allow-http: methods and a path (a prefix with *), matched on a plain path only", () => {
  assert.deepEqual(parseHttpRule("api.github.com GET,head /repos/*"), {
    host: "api.github.com",
    port: 443,
    methods: ["GET", "HEAD"],
    path: "/repos/*",
  });
  assert.deepEqual(parseHttpRule("api.test:8443 * /v1/models"), {
    host: "api.test",
    port: 8443,
    methods: ["*"],
    path: "/v1/models",
  });
  for (const [text, why] of [
    ["api.test GET", /use 'HOST\[:PORT\] METHOD/],
    ["api.test GET v1", /is not a path/],
    ["api.test GET /a*/b", /is not a path/],
    ["api.test G-T /a", /is not a list of methods/],
    ["api.test:99999 GET /a", /is not a port/],
  ] as const) {
    assert.throws(() => parseHttpRule(text), why, text);
  }
  const rules = [
    { methods: ["GET"], path: "/v1/*" },
    { methods: ["*"], path: "/health" },
  ];
  const ok = (method: string, url: string): boolean => requestAllowed(rules, method, url);
  assert.equal(requestAllowed([], "DELETE", "/anything"), true);
  assert.equal(ok("GET", "/v1/models?limit=2"), true);
  assert.equal(ok("get", "/v1/"), true);
  assert.equal(ok("POST", "/v1/models"), false);
  assert.equal(ok("DELETE", "/health"), true);
  assert.equal(ok("GET", "/health/x"), false);
  assert.equal(ok("GET", "/v2/models"), false);
  // Paths a server could read as another one.
  for (const url of [
    "/v1/../admin",
    "/v1/./x",
    "/v1/%2e%2e/admin",
    "/v1/%2E%2E/admin",
    "/v1/a%2fb",
    "/v1/a%5cb",
    "/v1/a\\b",
    "v1/x",
    "http://api.test/v1/x",
  ]) {
    assert.equal(ok("GET", url), false, url);
  }
});
