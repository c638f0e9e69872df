import assert from "node:assert/strict";
import { test } from "node:test";
import { CvisorError } from "../../src/core/errors.js";
import { parseDuration } from "../../src/sandbox/duration.js";

test("durations with units", () => {
  assert.equal(parseDuration("500ms"), 500);
  assert.equal(parseDuration("5s"), 5000);
  assert.equal(parseDuration("2m"), 120_000);
  assert.equal(parseDuration("1h"), 3_600_000);
  assert.equal(parseDuration("1.5s"), 1500);
});

test("bare digits and numbers are milliseconds", () => {
  assert.equal(parseDuration("250"), 250);
  assert.equal(parseDuration(300), 300);
  assert.equal(parseDuration("0"), 0);
});

test("anything else is a CvisorError naming the value", () => {
  for (const bad of ["", "5x", "s", "-1s", "1.5", "five", "5 s 3", "1e3", "2d"]) {
    assert.throws(
      () => parseDuration(bad),
      (err: unknown) =>
        err instanceof CvisorError &&
        err.message === `invalid duration: ${bad} (use e.g. 500ms, 5s, 2m)`,
      `"${bad}" should be refused`,
    );
  }
  assert.throws(() => parseDuration(-5), CvisorError);
  assert.throws(() => parseDuration(Number.NaN), CvisorError);
  assert.throws(() => parseDuration("5000000000"), CvisorError);
});
