// A CI job's dependency cache, as actions/cache does it: restore DIR/deps by a key (or the
// newest entry of the key's prefix), build what is missing in a sandbox, and save it again
// under the exact key when the restore was not an exact hit.
//
//   node dist/examples/ci-cache.js DIR KEY
//
// Prints one JSON object: how the restore went and whether an entry was saved.
import { Cache, Sandbox } from "cvisor";

const [dir, key] = process.argv.slice(2);
if (dir === undefined || key === undefined) {
  console.error("usage: ci-cache DIR KEY");
  process.exit(2);
}
const deps = `${dir}/deps`;
const cache = new Cache(); // $CVISOR_CACHE_BACKEND, else the disk cache
const restored = await cache.restore(key, deps, { restoreKeys: [key.replace(/-[^-]*$/, "-")] });
let saved = false;
if (restored.hit !== "exact") {
  // The "build": made in a sandbox, copied out whole.
  const name = `ci-cache-${process.pid}`;
  const sb = new Sandbox({ sandbox: name });
  try {
    // Any directory the guest may write; in the sandbox only, never on the host.
    const out = `/tmp/ci-cache-build-${process.pid}`;
    await sb.runCmd(`mkdir -p ${out} && echo "built for ${key}" > ${out}/lib.txt`, {
      reject: true,
    });
    await sb.cp(`${out}/.`, deps, { direction: "out" });
  } finally {
    await Sandbox.remove(name);
  }
  saved = (await cache.save(key, deps, { format: "zstd" })).saved;
}
console.log(JSON.stringify({ hit: restored.hit, matched: restored.entry?.key ?? null, saved }));
