// How the S3 backend names things: the s3://bucket/prefix spec, and cache keys as object names
// (flat, one-to-one, prefix-preserving). The backend itself is tested against a real server in
// test/e2e/cache-s3.test.ts.
import assert from "node:assert/strict";
import { test } from "node:test";
import { decodeKey, encodeKey, parseS3Url } from "../../cache/backends/s3.js";
import { CvisorError } from "../../src/core/errors.js";

test("parseS3Url: bucket, optional prefix, normalised description", () => {
  assert.deepEqual(parseS3Url("s3://my-bucket"), {
    bucket: "my-bucket",
    prefix: "",
    description: "s3://my-bucket",
  });
  assert.deepEqual(parseS3Url("s3://my-bucket/"), {
    bucket: "my-bucket",
    prefix: "",
    description: "s3://my-bucket",
  });
  assert.deepEqual(parseS3Url("s3://b.example/ci/cache//"), {
    bucket: "b.example",
    prefix: "ci/cache/",
    description: "s3://b.example/ci/cache",
  });
});

test("parseS3Url: refuses what is not s3://BUCKET[/PREFIX]", () => {
  for (const url of [
    "s3://",
    "s3://b",
    "s3:/bucket",
    "S3://bucket",
    "https://bucket/x",
    "s3://bucket?region=eu-west-1",
    "s3://bu cket/x",
    "s3://bucket//x",
    "s3://bucket/a/../b",
    "s3://bucket/./b",
    "s3://bucket/a\nb",
  ]) {
    assert.throws(
      () => parseS3Url(url),
      (err: unknown) => err instanceof CvisorError && err.code === "CV_ERR_INVALID",
      url,
    );
  }
});

test("encodeKey: flat, reversible, and a key prefix maps to a name prefix", () => {
  const keys = ["a", "a/b", "a%2Fb", "a%b", "a\\b", "a%5Cb", "a%25", "ü/ß €", "npm-linux-x64-3f2a"];
  const names = keys.map(encodeKey);
  for (const name of names) assert.ok(!name.includes("/") && !name.includes("\\"), name);
  assert.equal(new Set(names).size, keys.length, "no two keys share a name");
  for (const key of keys) assert.equal(decodeKey(encodeKey(key)), key);
  for (const key of keys) {
    for (let end = 0; end <= key.length; end++) {
      assert.ok(encodeKey(key).startsWith(encodeKey(key.slice(0, end))), `${key} / ${end}`);
    }
  }
  assert.equal(encodeKey("deps/linux%x"), "deps%2Flinux%25x");
});
