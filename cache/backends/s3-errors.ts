// S3 failures as one-line CvisorErrors that say whether it was the network, the credentials or
// the bucket, and which setting to check (remote caches that fail vaguely are the complaint).
import { CvisorError, CacheError, NotFoundError, UsageError } from "../../src/core/errors.js";

/** What a message needs to know about the backend. */
export interface S3Context {
  /** "s3://bucket/prefix". */
  description: string;
  bucket: string;
  region: string;
  /** The URL requests go to (a custom endpoint, else AWS's regional one). */
  endpoint: string;
  /** Whether the endpoint came from AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL / the profile. */
  customEndpoint: boolean;
}

/** Node's codes for "could not reach the server at all". */
const NETWORK_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EPIPE",
]);

const CREDENTIAL_ERRORS = new Set([
  "InvalidAccessKeyId",
  "SignatureDoesNotMatch",
  "AccessDenied",
  "ExpiredToken",
  "InvalidToken",
  "TokenRefreshRequired",
]);

interface ErrorFields {
  name?: unknown;
  code?: unknown;
  message?: unknown;
  cause?: unknown;
  errors?: unknown;
  $metadata?: { httpStatusCode?: number };
}

const fields = (err: unknown): ErrorFields =>
  typeof err === "object" && err !== null ? (err as ErrorFields) : {};

/** The S3 error code ("NoSuchKey") or the SDK error name, if any. */
export function s3ErrorName(err: unknown): string | undefined {
  const { name, code } = fields(err);
  if (typeof code === "string" && /^[A-Z][A-Za-z]+$/.test(code)) return code;
  return typeof name === "string" ? name : undefined;
}

export function httpStatus(err: unknown): number | undefined {
  return fields(err).$metadata?.httpStatusCode;
}

/** A network errno anywhere in the error, its causes or an AggregateError's members. */
function networkCode(err: unknown, depth = 0): string | undefined {
  if (depth > 4) return undefined;
  const { code, name, cause, errors } = fields(err);
  if (typeof code === "string" && NETWORK_CODES.has(code)) return code;
  if (name === "TimeoutError") return "timed out";
  for (const inner of [cause, ...(Array.isArray(errors) ? errors : [])]) {
    const found = inner === undefined ? undefined : networkCode(inner, depth + 1);
    if (found) return found;
  }
  return undefined;
}

/** Which credentials were in play, for the message. */
function credentialHint(env: NodeJS.ProcessEnv): string {
  if (env.AWS_ACCESS_KEY_ID) return "check credentials: AWS_ACCESS_KEY_ID from the environment";
  if (env.AWS_PROFILE) return `check credentials: AWS_PROFILE=${env.AWS_PROFILE}`;
  return "check credentials: AWS_PROFILE / AWS_ACCESS_KEY_ID";
}

function firstLine(text: unknown): string {
  return typeof text === "string" && text !== "" ? (text.split("\n")[0] ?? "") : "";
}

/** A CvisorError for a failed S3 operation; `doing` says what ("uploading the archive of KEY"). */
export function s3Failure(ctx: S3Context, doing: string, err: unknown): CvisorError {
  if (err instanceof CvisorError) return err;
  const at = ctx.description;
  const net = networkCode(err);
  if (net) {
    const check = ctx.customEndpoint
      ? "check AWS_ENDPOINT_URL_S3"
      : "check the network, or AWS_ENDPOINT_URL_S3 for an S3-compatible store";
    return new CacheError(
      `${at}: cannot connect to ${ctx.endpoint} (${net}; ${check})`,
      "ECONNREFUSED",
      {
        cause: err,
      },
    );
  }
  const name = s3ErrorName(err);
  const status = httpStatus(err);
  if (name === "NoSuchBucket") {
    return new NotFoundError(`${at}: no such bucket ${ctx.bucket} at ${ctx.endpoint}`, "ENOENT", {
      cause: err,
    });
  }
  if (name === "CredentialsProviderError") {
    return new CacheError(
      `${at}: no AWS credentials found (set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)`,
      "EACCES",
      { cause: err },
    );
  }
  if (status === 403 || (name !== undefined && CREDENTIAL_ERRORS.has(name))) {
    const what = name && name !== "Forbidden" && name !== "UnknownError" ? `, ${name}` : "";
    return new CacheError(
      `${at}: 403 Forbidden${what} while ${doing} (${credentialHint(process.env)})`,
      "EACCES",
      { cause: err },
    );
  }
  if (status === 301 || name === "PermanentRedirect" || name === "AuthorizationHeaderMalformed") {
    return new UsageError(
      `${at}: bucket ${ctx.bucket} is not in region ${ctx.region} (set AWS_REGION)`,
      "EINVAL",
      { cause: err },
    );
  }
  const detail = [status, name].filter((part) => part !== undefined).join(" ");
  const message = firstLine(fields(err).message);
  return new CacheError(
    `${at}: ${doing} failed: ${detail}${detail && message ? ": " : ""}${message}`,
    "EIO",
    { cause: err },
  );
}
