// --allow-net rules, --add-host entries and --dns servers as a user writes them, and the plan a
// run gets from them: the mode, the address rules the core enforces, the names its /etc/hosts
// lists, and the names its name service answers.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  hostsText,
  ipFamily,
  listedIn,
  parseAddHost,
  parseAllowRule,
  parseDnsServer,
  planNetwork,
} from "../../src/sandbox/net-policy.js";

test("rules: names, addresses, prefixes, IPv6 in brackets, ports and ranges", () => {
  const rule = (t: string) => {
    const r = parseAllowRule(t);
    return [r.host, r.portLo, r.portHi];
  };
  assert.deepEqual(rule("api.example.com"), [{ name: "api.example.com" }, 0, 65535]);
  assert.deepEqual(rule("API.Example.com.:443"), [{ name: "api.example.com" }, 443, 443]);
  assert.deepEqual(rule("10.0.0.0/8:8000-8100"), [{ addr: "10.0.0.0", prefix: 8 }, 8000, 8100]);
  assert.deepEqual(rule("192.0.2.7"), [{ addr: "192.0.2.7", prefix: 32 }, 0, 65535]);
  assert.deepEqual(rule("[2001:db8::1]:22"), [{ addr: "2001:db8::1", prefix: 128 }, 22, 22]);
  assert.deepEqual(rule("[fd00::]/8:443"), [{ addr: "fd00::", prefix: 8 }, 443, 443]);
  assert.deepEqual(rule("fd00::/8"), [{ addr: "fd00::", prefix: 8 }, 0, 65535]);
  assert.deepEqual(rule("::1"), [{ addr: "::1", prefix: 128 }, 0, 65535]);
  assert.deepEqual(rule("*.Example.com:443"), [{ suffix: "example.com" }, 443, 443]);
  assert.deepEqual(rule("*.a.b.example.com"), [{ suffix: "a.b.example.com" }, 0, 65535]);
  for (const [text, why] of [
    ["", /empty/],
    [" a.com", /spaces/],
    ["*.com", /not a wildcard name/],
    ["*.*.example.com", /not a wildcard name/],
    ["a.*.example.com", /neither an address nor a host name/],
    ["*example.com", /neither an address nor a host name/],
    ["10.0.0.0/33", /prefix must be 0 to 32/],
    ["[::1]/129", /prefix must be 0 to 128/],
    ["a.com:0", /is not a port/],
    ["a.com:65536", /is not a port/],
    ["a.com:9-8", /is not a port/],
    ["a.com:http", /is not a port/],
    ["[a.com]:80", /holds an IPv6 address/],
    ["a_b..c", /neither an address nor a host name/],
    ["a.com/8", /neither an address nor a host name/],
  ] as const) {
    assert.throws(() => parseAllowRule(text), why, text);
  }
});

test("addresses as inet_pton reads them", () => {
  for (const [text, family] of [
    ["1.2.3.4", 4],
    ["255.255.255.255", 4],
    ["256.1.1.1", 0],
    ["01.2.3.4", 0],
    ["1.2.3", 0],
    ["::1", 6],
    ["::", 6],
    ["::ffff:1.2.3.4", 6],
    ["2001:db8::7:8", 6],
    ["fe80::1%eth0", 0],
    ["1:2:3:4:5:6:7:8:9", 0],
    ["12345::", 0],
    ["a.com", 0],
    ["", 0],
  ] as const) {
    assert.equal(ipFamily(text), family, text);
  }
});

test("--add-host: name:ip or name=ip, IPv6 bare or in brackets", () => {
  assert.deepEqual(parseAddHost("api.test:127.0.0.1"), { name: "api.test", addr: "127.0.0.1" });
  assert.deepEqual(parseAddHost("db=::1"), { name: "db", addr: "::1" });
  assert.deepEqual(parseAddHost("db:[::1]"), { name: "db", addr: "::1" });
  assert.deepEqual(parseAddHost("v6:2001:db8::2"), { name: "v6", addr: "2001:db8::2" });
  for (const bad of ["api.test", "api.test:", ":1.2.3.4", "a b:1.2.3.4", "x:host.name"]) {
    assert.throws(() => parseAddHost(bad), /invalid --add-host/, bad);
  }
});

test("plans: the mode, the rules from names and addresses, and the names of /etc/hosts", () => {
  const asked: string[] = [];
  const resolve = (name: string) => {
    asked.push(name);
    return name === "api.example.com"
      ? { addrs: ["192.0.2.10", "2001:db8::10"] }
      : { error: "Name or service not known" };
  };
  assert.deepEqual(planNetwork({}, {}, resolve), {
    network: "host",
    netRules: [],
    hosts: new Map(),
    injects: [],
    diverts: [],
    names: [],
    dns: [],
  });
  // An injected host's addresses are diverted (TCP, its port), and listed in /etc/hosts.
  const injected = planNetwork(
    { inject: ["api.example.com X-Key: {K}"] },
    { inject: ["api.example.com:8443 X-Key: {K}"] },
    resolve,
  );
  assert.equal(injected.network, "host");
  assert.deepEqual(injected.diverts, [
    { addr: "192.0.2.10", prefix: 32, portLo: 443, portHi: 443 },
    { addr: "2001:db8::10", prefix: 128, portLo: 443, portHi: 443 },
    { addr: "192.0.2.10", prefix: 32, portLo: 8443, portHi: 8443 },
    { addr: "2001:db8::10", prefix: 128, portLo: 8443, portHi: 8443 },
  ]);
  assert.deepEqual([...injected.hosts.keys()], ["api.example.com"]);
  assert.throws(
    () => planNetwork({ network: false, inject: ["api.example.com X: y"] }, {}, resolve),
    /--inject needs the network/,
  );
  assert.equal(planNetwork({ network: false }, {}, resolve).network, "none");
  assert.equal(planNetwork({}, { network: "none" }, resolve).network, "none");
  // An allow-list's names are looked up by the guest, through the run's name service, or in
  // its /etc/hosts (those addresses are allowed at start); nothing is resolved here.
  asked.length = 0;
  const list = planNetwork(
    { allowNet: ["api.example.com:443", "*.cdn.example:80-81"] },
    { allowNet: ["10.0.0.0/8", "localhost:8080"], addHosts: ["db.test:127.0.0.5"] },
    resolve,
    () => "127.0.0.1 localhost # loopback\n::1 localhost ip6-localhost\n",
  );
  assert.deepEqual(asked, []);
  assert.equal(list.network, "allow-list");
  assert.deepEqual(list.netRules, [
    { addr: "10.0.0.0", prefix: 8, portLo: 0, portHi: 65535 },
    { addr: "127.0.0.1", prefix: 32, portLo: 8080, portHi: 8080 },
    { addr: "::1", prefix: 128, portLo: 8080, portHi: 8080 },
  ]);
  assert.deepEqual(list.names, [
    { name: "api.example.com", wildcard: false, portLo: 443, portHi: 443 },
    { name: "cdn.example", wildcard: true, portLo: 80, portHi: 81 },
    { name: "localhost", wildcard: false, portLo: 8080, portHi: 8080 },
  ]);
  assert.deepEqual([...list.hosts], [["db.test", ["127.0.0.5"]]]);
  // The guest reaches the name service by a connect to 127.0.0.53:53, diverted to the broker.
  assert.deepEqual(list.diverts, [{ addr: "127.0.0.53", prefix: 32, portLo: 53, portHi: 53 }]);
  // Without a name among its rules, an allow-list has no name service.
  assert.deepEqual(planNetwork({ allowNet: ["10.0.0.1"] }, {}, resolve).names, []);
  // --dns: the name service's servers; the guest's own outside an allow-list (port 53 only).
  assert.deepEqual(
    planNetwork({ allowNet: ["*.svc.test"], dns: ["127.0.0.1:5353"] }, {}, resolve).dns,
    ["127.0.0.1:5353"],
  );
  assert.deepEqual(planNetwork({}, { dns: ["::1"] }, resolve).dns, ["[::1]:53"]);
  for (const [o, why] of [
    [{ dns: ["10.0.0.1:5353"] }, /--dns with a port needs an allow-list name rule/],
    [{ dns: ["10.0.0.1"], network: "none" }, /--dns needs the network/],
    [{ dns: ["10.0.0.1"], allowNet: ["10.0.0.2"] }, /no --allow-net rule names a host/],
    [{ network: "host", allowNet: ["*.example.com"] }, /a wildcard needs an allow-list/],
  ] as const) {
    assert.throws(() => planNetwork(o, {}, resolve), why);
  }
  // An --add-host name is not looked up: it is what the rule means.
  asked.length = 0;
  const added = planNetwork({ allowNet: ["api.test:80"], addHosts: ["api.test=::1"] }, {}, resolve);
  assert.deepEqual(asked, []);
  assert.deepEqual(added.netRules, [{ addr: "::1", prefix: 128, portLo: 80, portHi: 80 }]);
  // Explicit host mode keeps every destination; its rules only open the metadata range.
  assert.equal(
    planNetwork({ network: "host", allowNet: ["169.254.169.254:80"] }, {}, resolve).network,
    "host",
  );
  // A run's "none" wins over its sandbox's rules; "none" with rules at one level is an error.
  assert.deepEqual(
    planNetwork({ allowNet: ["10.0.0.1"] }, { network: false }, resolve).netRules,
    [],
  );
  assert.throws(
    () => planNetwork({ network: "none", allowNet: ["10.0.0.1"] }, {}, resolve),
    /needs the network/,
  );
  assert.throws(
    () => planNetwork({ network: "none" }, { allowNet: ["10.0.0.1"] }, resolve),
    /needs the network/,
  );
  assert.throws(
    () => planNetwork({ network: "host", allowNet: ["nowhere.test"] }, {}, resolve),
    /cannot resolve nowhere\.test: Name or service not known/,
  );
  assert.throws(
    () => planNetwork({ network: "bridge" as "host" }, {}, resolve),
    /invalid network mode bridge/,
  );
});

test("/etc/hosts: the host's lines first, then one line per address of each name", () => {
  const hosts = new Map([
    ["api.test", ["127.0.0.1", "::1"]],
    ["db.test", ["127.0.0.5"]],
  ]);
  assert.equal(
    hostsText("127.0.0.1 localhost", hosts),
    "127.0.0.1 localhost\n# cvisor: --add-host and --allow-net names\n127.0.0.1\tapi.test\n::1\tapi.test\n127.0.0.5\tdb.test\n",
  );
});

test("--dns servers: IP, IP:PORT, IPv6, [IPv6]:PORT", () => {
  assert.equal(parseDnsServer("10.0.0.1"), "10.0.0.1:53");
  assert.equal(parseDnsServer("127.0.0.1:5353"), "127.0.0.1:5353");
  assert.equal(parseDnsServer("2001:db8::1"), "[2001:db8::1]:53");
  assert.equal(parseDnsServer("[::1]:5353"), "[::1]:5353");
  for (const bad of ["", "dns.example", "10.0.0.1:0", "10.0.0.1:99999", "[10.0.0.1]:53", "::1:x"]) {
    assert.throws(() => parseDnsServer(bad), /invalid --dns/, bad);
  }
});

test("a hosts file's addresses for a name: every line that lists it, comments left out", () => {
  const text =
    "127.0.0.1\tlocalhost\n# 10.0.0.9 api.test\n::1 localhost ip6-localhost\n10.0.0.7 API.test # x\nbad api.test\n";
  assert.deepEqual(listedIn(text, "localhost"), ["127.0.0.1", "::1"]);
  assert.deepEqual(listedIn(text, "api.test"), ["10.0.0.7"]);
  assert.deepEqual(listedIn(text, "ip6"), []);
});
