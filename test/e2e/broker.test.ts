// The credential broker from real guests: curl, Python's requests and Node's fetch reach an
// HTTPS server of the test (a certificate for api.test from a CA of the test's, trusted by
// cvisor's own process) with the injected header, while the guest holds only a placeholder:
// not in its environment, its memory, its files or any response (the server echoes the header;
// the broker puts the placeholder back). A request to another host carries nothing; the
// placeholder alone is refused by the server; nothing but the run's own diverted connects is
// served by the broker.
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import https from "node:https";
import { join } from "node:path";
import { Sandbox } from "../../src/index.js";
import { placeholder } from "../../src/sandbox/broker/broker.js";
import { makeCa, makeServerCert } from "../../src/sandbox/broker/x509.js";
import { gtest } from "../helpers/guard.js";
import { cvisor, show, uniqueToken } from "../helpers/repo.js";

const PY = "/usr/bin/python3";

interface Server {
  port: number;
  /** The Authorization header of each request, in order. */
  seen: (string | undefined)[];
  close: () => Promise<void>;
}

/** An HTTPS server on 127.0.0.1 for `name`: 200 for `Bearer SECRET`, else 401; echoes the header. */
function startServer(
  name: string,
  ca: ReturnType<typeof makeCa>,
  caName: string,
  secret: string,
): Promise<Server> {
  const cert = makeServerCert(ca, caName, name);
  const seen: (string | undefined)[] = [];
  const key = cert.key.export({ type: "pkcs8", format: "pem" });
  const server = https.createServer({ cert: cert.cert, key }, (req, res) => {
    seen.push(req.headers.authorization);
    const ok = req.headers.authorization === `Bearer ${secret}`;
    res.writeHead(ok ? 200 : 401, {
      "content-type": "text/plain",
      "x-echo": String(req.headers.authorization),
    });
    res.end(`${ok ? "welcome" : "denied"} ${name} auth=${String(req.headers.authorization)}\n`);
  });
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      const addr = server.address();
      resolve({
        port: typeof addr === "object" && addr ? addr.port : 0,
        seen,
        close: () => new Promise<void>((r) => server.close(() => r())),
      });
    });
  });
}

interface World {
  secret: string;
  api: Server;
  other: Server;
  caFile: string;
  /** cvisor's options: names, the secret from $TOKEN, the injected header, other.test allowed. */
  args: string[];
  env: Record<string, string>;
  done: () => Promise<void>;
}

async function world(dir: string): Promise<World> {
  const caName = `cvisor broker test CA ${uniqueToken("ca")}`;
  const ca = makeCa(caName);
  const caFile = join(dir, "test-ca.pem");
  writeFileSync(caFile, ca.cert);
  // Two halves: the secret is never whole in a guest's command line or script.
  const secret = `${uniqueToken("sk-live")}-${uniqueToken("tail")}`;
  const api = await startServer("api.test", ca, caName, secret);
  const other = await startServer("other.test", ca, caName, secret);
  return {
    secret,
    api,
    other,
    caFile,
    args: [
      "--add-host",
      "api.test:127.0.0.1",
      "--add-host",
      "other.test:127.0.0.1",
      "--secret",
      "API_KEY=env:TOKEN",
      "--inject",
      `api.test:${api.port} Authorization: Bearer {API_KEY}`,
    ],
    // The broker (cvisor's child) trusts the test's CA for the real server; the guest does not.
    env: { TOKEN: secret, NODE_EXTRA_CA_CERTS: caFile },
    done: async () => {
      await api.close();
      await other.close();
    },
  };
}

gtest(
  "curl, Python requests and Node fetch get the injected header; the guest sees the placeholder",
  async (fx) => {
    const w = await world(fx.scratch);
    try {
      const url = `https://api.test:${w.api.port}/v1`;
      const script = [
        'echo "env: $API_KEY"',
        `curl -sS -i ${url} | tr -d '\\r' | grep -E '^(HTTP|x-echo)|welcome|denied'`,
        `${PY} -c 'import requests; r = requests.get("${url}"); print("requests", r.status_code, r.text.strip())'`,
        `${process.execPath} -e 'fetch("${url}").then(async (r) => console.log("fetch", r.status, (await r.text()).trim()))'`,
      ].join("; ");
      const r = await cvisor(w.args, ["sh", "-c", script], { extraEnv: w.env });
      assert.equal(r.code, 0, show(r));
      const ph = placeholder("API_KEY");
      const welcome = `welcome api.test auth=Bearer ${ph}`;
      assert.equal(
        r.out,
        [
          `env: ${ph}`,
          "HTTP/1.1 200 OK",
          `x-echo: Bearer ${ph}`,
          welcome,
          `requests 200 ${welcome}`,
          `fetch 200 ${welcome}`,
          "",
        ].join("\n"),
        show(r),
      );
      assert.ok(!r.out.includes(w.secret) && !r.err.includes(w.secret), show(r));
      // The server got the secret itself, three times.
      assert.deepEqual(w.api.seen, Array(3).fill(`Bearer ${w.secret}`));
    } finally {
      await w.done();
    }
  },
  { timeout: 120_000 },
);

gtest(
  "another host gets no secret, the placeholder alone is refused, only diverted connects are served",
  async (fx) => {
    const w = await world(fx.scratch);
    try {
      const script = [
        // other.test is reached directly (the test's CA, given to curl): no header added.
        `curl -sS --cacert ${w.caFile} https://other.test:${w.other.port}/`,
        // Plain HTTP to the injected HTTPS port: closed, nothing sent on in clear text.
        `curl -s -o /dev/null -w 'plain %{http_code}\\n' http://api.test:${w.api.port}/`,
        // The broker's own port, learned from a diverted socket's peer, and connected to
        // directly: not announced, so closed unserved.
        `${PY} -c '
import socket
s = socket.create_connection(("api.test", ${w.api.port}))
peer = s.getpeername()
d = socket.create_connection(peer)
d.sendall(b"GET / HTTP/1.1\\r\\nHost: api.test\\r\\n\\r\\n")
d.settimeout(10)
try:
    print("direct:", repr(d.recv(100)))
except ConnectionResetError:
    print("direct: reset")
'`,
      ].join("; ");
      const r = await cvisor(w.args, ["sh", "-c", script], { extraEnv: w.env, timeoutMs: 60_000 });
      assert.equal(r.code, 0, show(r));
      assert.match(
        r.out,
        /^denied other\.test auth=undefined\nplain 000\ndirect: (b''|reset)\n$/,
        show(r),
      );
      assert.deepEqual(w.other.seen, [undefined]);
      assert.deepEqual(w.api.seen, []);
      // The placeholder is worth nothing on its own.
      const status = await new Promise<number>((resolve, reject) => {
        https
          .get(
            {
              host: "127.0.0.1",
              port: w.api.port,
              servername: "api.test",
              ca: readFileSync(w.caFile),
              headers: { authorization: `Bearer ${placeholder("API_KEY")}` },
            },
            (res) => {
              res.resume();
              resolve(res.statusCode ?? 0);
            },
          )
          .on("error", reject);
      });
      assert.equal(status, 401);
    } finally {
      await w.done();
    }
  },
  { timeout: 120_000 },
);

/** Two halves of the secret, so the searching program never holds it whole. */
function halves(secret: string): [string, string] {
  const mid = Math.floor(secret.length / 2);
  return [secret.slice(0, mid), secret.slice(mid)];
}

function filesHolding(dir: string, needle: string): string[] {
  const found: string[] = [];
  const walk = (d: string): void => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      const st = statSync(p, { throwIfNoEntry: false });
      if (st?.isDirectory()) walk(p);
      else if (st?.isFile() && readFileSync(p).includes(needle)) found.push(p);
    }
  };
  walk(dir);
  return found;
}

gtest(
  "no trace of the secret in the guest's memory, environment or files (a named sandbox)",
  async (fx) => {
    const w = await world(fx.scratch);
    const name = uniqueToken("broker-sb")
      .replace(/[^a-z0-9-]/gi, "-")
      .slice(0, 60);
    try {
      const [a, b] = halves(w.secret);
      // After its request, the guest looks for the two halves side by side in every readable
      // page of its own memory and its environment, and writes what it got into a file.
      const py = `
import requests
r = requests.get("https://api.test:${w.api.port}/")
open("/tmp/response.txt", "w").write(r.text)
a, b = ${JSON.stringify(a)}.encode(), ${JSON.stringify(b)}.encode()
def holds(data):
    i = data.find(a)
    while i >= 0:
        if data[i + len(a):i + len(a) + len(b)] == b:
            return True
        i = data.find(a, i + 1)
    return False
hits = 0
with open("/proc/self/mem", "rb") as mem:
    for line in open("/proc/self/maps"):
        span, perms = line.split()[:2]
        if not perms.startswith("r"):
            continue
        lo, hi = (int(x, 16) for x in span.split("-"))
        try:
            mem.seek(lo)
            hits += holds(mem.read(hi - lo))
        except (OSError, ValueError, OverflowError):
            pass
print(r.status_code, "memory:", hits, "environ:", holds(open("/proc/self/environ", "rb").read()))
`;
      writeFileSync(join(fx.scratch, "probe.py"), py);
      const r = await cvisor(["--sandbox", name, ...w.args], [PY, join(fx.scratch, "probe.py")], {
        extraEnv: w.env,
        timeoutMs: 90_000,
      });
      assert.equal(r.code, 0, show(r));
      assert.equal(r.out, "200 memory: 0 environ: False\n", show(r));
      assert.equal(w.api.seen.length, 1);
      // The sandbox's layer holds the response, with the placeholder only.
      const home = process.env.CVISOR_HOME ?? join(process.env.HOME ?? "", ".local/share/cvisor");
      const upper = join(home, "sandboxes", name);
      assert.match(readFileSync(join(upper, "upper", "tmp", "response.txt"), "utf8"), /welcome/);
      assert.deepEqual(filesHolding(upper, w.secret), []);
    } finally {
      await cvisor(["rm", name], []);
      await w.done();
    }
  },
  { timeout: 120_000 },
);

gtest(
  "--inject with an allow-list, bad rules and secrets: one line each",
  async (fx) => {
    const w = await world(fx.scratch);
    try {
      // The injected host needs no --allow-net rule; everything else still does.
      const r = await cvisor(
        [...w.args, "--allow-net", "10.255.255.1:9"],
        [
          "sh",
          "-c",
          `curl -sS https://api.test:${w.api.port}/; curl -sS --cacert ${w.caFile} https://other.test:${w.other.port}/ 2>&1 | head -c 0; echo "other: $?"`,
        ],
        { extraEnv: w.env },
      );
      assert.match(r.out, /^welcome api\.test auth=Bearer cvisor-secret-placeholder-API_KEY\n/);
      assert.match(r.err, /refused connect to 127\.0\.0\.1 port \d+: no --allow-net rule/, show(r));
      assert.deepEqual(w.other.seen, []);
      for (const [args, message, env] of [
        [["--secret", "API_KEY=env:NOPE"], /\$NOPE is empty or not set/, {}],
        [["--secret", "1KEY=env:TOKEN"], /invalid --secret '1KEY=env:TOKEN'/, {}],
        [["--secret", "K=file:/nonexistent/x"], /cannot read \/nonexistent\/x: ENOENT/, {}],
        [["--inject", "api.test Authorization: {NOPE}"], /no --secret NOPE for \{NOPE\}/, {}],
        [["--inject", "10.0.0.1 X-A: b"], /is not a host name/, {}],
        [["--inject", "api.test no-colon"], /invalid --inject/, {}],
        [["--secret", "K=env:TOKEN"], /secret K goes nowhere/, { TOKEN: "x" }],
        [["--network", "none", "--inject", "api.test X: y"], /--inject needs the network/, {}],
      ] as const) {
        const bad = await cvisor(["--add-host", "api.test:127.0.0.1", ...args], ["true"], {
          extraEnv: { ...env },
        });
        assert.equal(bad.code, 125, show(bad));
        assert.match(bad.err, message, show(bad));
        assert.equal(bad.err.trim().split("\n").length, 1, show(bad));
      }
    } finally {
      await w.done();
    }
  },
  { timeout: 120_000 },
);

gtest(
  "a named sandbox whose guest rewrote the system bundle still trusts the run's CA",
  async (fx) => {
    const w = await world(fx.scratch);
    const name = uniqueToken("broker-ca")
      .replace(/[^a-z0-9-]/gi, "-")
      .slice(0, 60);
    try {
      const bundle = "/etc/ssl/certs/ca-certificates.crt";
      const rewrite = await cvisor(["--sandbox", name], ["sh", "-c", `echo > ${bundle}`]);
      assert.equal(rewrite.code, 0, show(rewrite));
      const r = await cvisor(
        ["--sandbox", name, ...w.args],
        ["sh", "-c", `wc -c < ${bundle}; curl -sS https://api.test:${w.api.port}/`],
        { extraEnv: w.env },
      );
      assert.equal(r.code, 0, show(r));
      assert.equal(r.out, `1\nwelcome api.test auth=Bearer ${placeholder("API_KEY")}\n`, show(r));
    } finally {
      await cvisor(["rm", name], []);
      await w.done();
    }
  },
  // Only root writes the system bundle, in a sandbox as on the host.
  { timeout: 120_000, skip: process.getuid?.() !== 0 && "the system bundle is root's" },
);

gtest("--allow-http: the broker sends on only the requests a rule allows", async (fx) => {
  const w = await world(fx.scratch);
  try {
    const base = `https://api.test:${w.api.port}`;
    const status = (method: string, path: string): string =>
      `curl -sS --path-as-is -o /dev/null -w '${method} ${path} %{http_code}\\n' -X ${method} '${base}${path}'`;
    const r = await cvisor(
      [...w.args, "--allow-http", `api.test:${w.api.port} GET /v1/*`],
      [
        "sh",
        "-c",
        [
          status("GET", "/v1/models"),
          status("POST", "/v1/models"),
          status("GET", "/v2/models"),
          status("GET", "/v1/../v2/models"),
          status("GET", "/v1/%2e%2e/v2"),
        ].join("; "),
      ],
      { extraEnv: w.env },
    );
    assert.equal(
      r.out,
      [
        "GET /v1/models 200",
        "POST /v1/models 403",
        "GET /v2/models 403",
        "GET /v1/../v2/models 403",
        "GET /v1/%2e%2e/v2 403",
        "",
      ].join("\n"),
      show(r),
    );
    // Only the allowed request reached the server.
    assert.deepEqual(w.api.seen, [`Bearer ${w.secret}`]);
    const bad = await cvisor(["--allow-http", "api.test GET /x"], ["true"]);
    assert.equal(bad.code, 125, show(bad));
    assert.match(bad.err, /--allow-http rules are checked by the credential broker/);
  } finally {
    await w.done();
  }
});

gtest("library: secrets and inject per sandbox and per run", async (fx) => {
  const w = await world(fx.scratch);
  const before = process.env.NODE_EXTRA_CA_CERTS;
  process.env.NODE_EXTRA_CA_CERTS = w.caFile; // the broker process inherits it
  try {
    const url = `https://api.test:${w.api.port}/`;
    const sb = new Sandbox({
      addHosts: ["api.test:127.0.0.1"],
      secrets: { API_KEY: w.secret },
      inject: [`api.test:${w.api.port} Authorization: Bearer {API_KEY}`],
    });
    const r = await sb.run(["curl", "-sS", url]);
    assert.equal(r.stdout, `welcome api.test auth=Bearer ${placeholder("API_KEY")}\n`, r.stderr);
    // Per run: another secret source, from a file.
    const file = join(fx.scratch, "key.txt");
    writeFileSync(file, `${w.secret}\n`);
    const r2 = await new Sandbox({ addHosts: ["api.test:127.0.0.1"] }).run(["curl", "-sS", url], {
      secrets: { API_KEY: { file } },
      inject: [`api.test:${w.api.port} Authorization: Bearer {API_KEY}`],
    });
    assert.match(r2.stdout, /^welcome/, r2.stderr);
    assert.deepEqual(w.api.seen, [`Bearer ${w.secret}`, `Bearer ${w.secret}`]);
    await assert.rejects(
      new Sandbox({
        addHosts: ["api.test:127.0.0.1"],
        secrets: { K: { env: "CVISOR_NO_SUCH_VAR" } },
        inject: ["api.test X: {K}"],
      }).run(["true"]),
      /\$CVISOR_NO_SUCH_VAR is empty or not set/,
    );
  } finally {
    if (before === undefined) delete process.env.NODE_EXTRA_CA_CERTS;
    else process.env.NODE_EXTRA_CA_CERTS = before;
    await w.done();
  }
});
