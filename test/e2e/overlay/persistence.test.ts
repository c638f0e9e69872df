// Differential test of named sandboxes: a sandbox's layer persists across runs, another
// sandbox does not see it, and the host never changes. Natively each sandbox label is its own
// copy of the fixture, kept across steps; in the sandbox it is `cvisor --sandbox NAME`, one
// name per label (test/helpers/differential.ts). The guard checks the host afterwards.
import assert from "node:assert/strict";
import { diffTest, sh } from "../../helpers/differential.js";

const LOOK =
  "cat new.txt; cat hello.txt; ls renamed-sub sub 2>&1 | sort; ls -A | sort; find . -type f | sort | md5sum";

diffTest("persistence: run 2 of sandbox s sees run 1's changes; sandbox t sees the original", {
  steps: [
    sh("echo persisted > new.txt && rm hello.txt && mv sub renamed-sub && echo run-1-done", "s"),
    sh(LOOK, "s"),
    sh(LOOK, "t"),
    sh("echo only-in-t > t.txt; rm data.bin", "t"),
    sh(`${LOOK}; test -e t.txt || echo no-t-file; test -e data.bin && echo data-still-here`, "s"),
  ],
  expectNative: (r) => {
    const [, s2, t1, , s3] = r.steps;
    assert.match(s2?.stdout ?? "", /^persisted\n/);
    assert.match(s2?.stderr ?? "", /hello\.txt: No such file/);
    assert.match(t1?.stdout ?? "", /^hello from the host\n/);
    assert.match(s3?.stdout ?? "", /no-t-file\ndata-still-here\n$/);
  },
});
