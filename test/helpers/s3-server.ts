// A real S3-compatible server on loopback for the S3 backend tests: s3rver (a devDependency) in
// a child process (s3-server-main.ts says why), on 127.0.0.1 with a random port, storing in its
// own temp dir, with one bucket made. Nothing of the SDK is mocked.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { tempRoot } from "./repo.js";

/** One request as the server saw it (before authentication). */
export interface S3Request {
  method: string;
  bucket: string;
  /** The object key, decoded; "" for bucket-level requests. */
  key: string;
  /** Names of the query parameters ("uploads", "uploadId", "partNumber", "list-type", …). */
  query: string[];
}

export interface S3TestServer {
  /** "http://127.0.0.1:PORT", for AWS_ENDPOINT_URL_S3. */
  readonly endpoint: string;
  readonly bucket: string;
  /** The server's storage directory (s3rver's on-disk layout). */
  readonly storeDir: string;
  /** Every request so far, in order. */
  requests(): S3Request[];
  /** Upload ids of multipart uploads begun and neither completed nor aborted, from the disk. */
  pendingUploadsOnDisk(): string[];
  /** Bytes of parts received so far for the pending multipart uploads (s3rver writes a part to
   * disk as it arrives). */
  partBytesOnDisk(): number;
  stop(): Promise<void>;
}

/**
 * What the AWS SDK reads for a test server: its endpoint (when given) and the server's
 * credentials, and nothing from the host (no profile, no ~/.aws, never the instance metadata
 * service).
 */
export function s3ClientEnv(server?: Pick<S3TestServer, "endpoint">): Record<string, string> {
  return {
    ...(server ? { AWS_ENDPOINT_URL_S3: server.endpoint } : {}),
    AWS_ACCESS_KEY_ID: "S3RVER",
    AWS_SECRET_ACCESS_KEY: "S3RVER",
    AWS_CONFIG_FILE: "/nonexistent/aws-config",
    AWS_SHARED_CREDENTIALS_FILE: "/nonexistent/aws-credentials",
    AWS_EC2_METADATA_DISABLED: "true",
  };
}

const mainScript = path.join(path.dirname(fileURLToPath(import.meta.url)), "s3-server-main.js");

/** Starts a server with one bucket in a fresh temp dir (removed by stop()). */
export async function startS3Server(bucket = "cvisor-test"): Promise<S3TestServer> {
  const root = mkdtempSync(path.join(tempRoot(), "cvisor-s3-"));
  const storeDir = path.join(root, "store");
  const logFile = path.join(root, "requests.jsonl");
  const uploads = path.join(storeDir, bucket, "._S3rver_uploads");
  const child = spawn(
    process.execPath,
    ["--openssl-legacy-provider", mainScript, storeDir, bucket, logFile],
    { stdio: ["pipe", "pipe", "inherit"] },
  );
  let port: number;
  try {
    port = await readPort(child);
  } catch (err) {
    child.kill("SIGKILL");
    rmSync(root, { recursive: true, force: true });
    throw err;
  }
  return {
    endpoint: `http://127.0.0.1:${port}`,
    bucket,
    storeDir,
    requests: () =>
      existsSync(logFile)
        ? readFileSync(logFile, "utf8")
            .split("\n")
            .filter((line) => line !== "")
            .map((line) => JSON.parse(line) as S3Request)
        : [],
    pendingUploadsOnDisk: () => (existsSync(uploads) ? readdirSync(uploads) : []),
    partBytesOnDisk: () => {
      let bytes = 0;
      for (const id of existsSync(uploads) ? readdirSync(uploads) : []) {
        for (const name of readdirSync(path.join(uploads, id))) {
          // A part is being removed when its upload completes or aborts.
          if (/^\d+$/.test(name))
            bytes += statSync(path.join(uploads, id, name), { throwIfNoEntry: false })?.size ?? 0;
        }
      }
      return bytes;
    },
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once("exit", resolve));
        child.kill("SIGTERM");
        await exited;
      }
      rmSync(root, { recursive: true, force: true });
    },
  };
}

/** The port the child prints once listening; rejects if it exits first or takes over 15 s. */
function readPort(child: ChildProcess): Promise<number> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("s3rver did not start in 15 s")), 15_000);
    const lines = createInterface({ input: child.stdout! });
    lines.once("line", (line) => {
      clearTimeout(timer);
      lines.close();
      const { port } = JSON.parse(line) as { port: number };
      resolve(port);
    });
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`s3rver exited before listening (${signal ?? `code ${code}`})`));
    });
  });
}
