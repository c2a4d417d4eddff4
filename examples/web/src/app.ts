// The page's script: calls grpc-go's Echo service, served by leangrpc, with
// gRPC-Web and the Connect protocol (each with its binary and JSON
// encodings), checks every answer, and writes the results into the page
// (#results, as JSON; the test reads it from there).
//
// Query parameters: cross=URL also runs every check against a server of
// another origin (which must allow this page's origin: leangrpc's
// CORSOrigins option); refuse=URL checks that a server of another origin
// that does not allow it cannot be read; report=PATH posts the results,
// as #results shows them, to PATH of this page's origin when done (the
// test's way to learn them without a browser driver).

import {
  Code,
  ConnectError,
  createClient,
  decodeBinaryHeader,
  encodeBinaryHeader,
  type Client,
  type Transport,
} from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
import { Echo } from "./gen/grpc/examples/echo/echo_pb";
import { ErrorInfoSchema } from "./gen/google/rpc/error_info_pb";

type Check = { ok: boolean; detail: string };
type Checks = Record<string, Check>;

// The transports, by name, and the protocol the server should see.
const transports: Record<string, { protocol: string; make: (baseUrl: string) => Transport }> = {
  "grpc-web": { protocol: "grpc-web", make: (baseUrl) => createGrpcWebTransport({ baseUrl }) },
  "grpc-web+json": { protocol: "grpc-web", make: (baseUrl) => createGrpcWebTransport({ baseUrl, useBinaryFormat: false }) },
  connect: { protocol: "connect", make: (baseUrl) => createConnectTransport({ baseUrl }) },
  "connect+proto": { protocol: "connect", make: (baseUrl) => createConnectTransport({ baseUrl, useBinaryFormat: true }) },
};

const timeoutMs = 10_000; // every call: a hung call fails its check, not the page
const blob = new Uint8Array([0, 1, 2, 0x7f, 0x80, 0xfe, 0xff]); // binary metadata (x-blob-bin)
const failMessage = "échec: the message was “fail”";

function expect(cond: boolean, what: string): void {
  if (!cond) throw new Error(what);
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

// failureOf runs a call that must fail and returns its error.
async function failureOf(call: () => Promise<unknown>): Promise<ConnectError> {
  try {
    await call();
  } catch (e) {
    return ConnectError.from(e);
  }
  throw new Error("the call succeeded; it should have failed");
}

// checkMetadata checks the response metadata of a call: the request's
// headers echoed, the protocol, the deadline the server saw, the trailer.
function checkMetadata(header: Headers | undefined, trailer: Headers | undefined, protocol: string): string {
  expect(header !== undefined, "no response header");
  expect(header!.get("x-echo-greeting") === "bonjour", `x-echo-greeting: ${header!.get("x-echo-greeting")}`);
  expect(header!.get("x-protocol") === protocol, `x-protocol: ${header!.get("x-protocol")}, want ${protocol}`);
  const blobBack = decodeBinaryHeader(header!.get("x-blob-bin") ?? "");
  expect(sameBytes(blobBack, blob), `x-blob-bin: [${blobBack}]`);
  const left = Number(header!.get("x-deadline-ms"));
  expect(left > 0 && left <= timeoutMs, `x-deadline-ms: ${header!.get("x-deadline-ms")}`);
  expect(trailer?.get("x-trailer") === "bye", `x-trailer: ${trailer?.get("x-trailer")}`);
  return `header x-echo-greeting=${header!.get("x-echo-greeting")} x-protocol=${header!.get("x-protocol")} x-deadline-ms=${left}, trailer x-trailer=${trailer!.get("x-trailer")}`;
}

// checkFailure checks the status of a failed call: code, message, the
// ErrorInfo detail, and the metadata that came with it.
function checkFailure(err: ConnectError, protocol: string): string {
  expect(err.code === Code.InvalidArgument, `code ${Code[err.code]} (${err.message})`);
  expect(err.rawMessage === failMessage, `message ${JSON.stringify(err.rawMessage)}`);
  const infos = err.findDetails(ErrorInfoSchema);
  expect(infos.length === 1, `${infos.length} ErrorInfo details of ${err.details.length}`);
  const info = infos[0];
  expect(info.reason === "ECHO_REFUSED" && info.domain === "example.leangrpc" && info.metadata["message"] === "fail",
    `detail ${JSON.stringify(info)}`);
  expect(err.metadata.get("x-protocol") === protocol, `error metadata x-protocol: ${err.metadata.get("x-protocol")}`);
  expect(err.metadata.get("x-trailer") === "bye", `error metadata x-trailer: ${err.metadata.get("x-trailer")}`);
  return `${Code[err.code]} ${JSON.stringify(err.rawMessage)}, detail ${info.$typeName} reason=${info.reason}`;
}

// callOptions are the options of a checked call: request metadata (a
// plain and a binary header), a deadline, and hooks for the response's.
function callOptions(got: { header?: Headers; trailer?: Headers }) {
  return {
    timeoutMs,
    headers: { "x-greeting": "bonjour", "x-blob-bin": encodeBinaryHeader(blob) },
    onHeader: (h: Headers) => (got.header = h),
    onTrailer: (t: Headers) => (got.trailer = t),
  };
}

// suite runs every check through one transport.
async function suite(client: Client<typeof Echo>, protocol: string): Promise<Checks> {
  const checks: Checks = {};
  const run = async (name: string, fn: () => Promise<string>) => {
    try {
      checks[name] = { ok: true, detail: await fn() };
    } catch (e) {
      checks[name] = { ok: false, detail: e instanceof Error ? `${e.name}: ${e.message}` : String(e) };
    }
  };

  await run("unary", async () => {
    const got: { header?: Headers; trailer?: Headers } = {};
    const res = await client.unaryEcho({ message: "hello ✓" }, callOptions(got));
    expect(res.message === "hello ✓", `message ${JSON.stringify(res.message)}`);
    return `${JSON.stringify(res.message)}; ${checkMetadata(got.header, got.trailer, protocol)}`;
  });

  await run("unary-empty", async () => {
    const res = await client.unaryEcho({}, { timeoutMs });
    expect(res.message === "", `message ${JSON.stringify(res.message)}`);
    return "empty request, empty response";
  });

  await run("unary-large", async () => {
    const message = "é".repeat(300_000); // 600 kB of UTF-8
    const res = await client.unaryEcho({ message }, { timeoutMs });
    expect(res.message === message, `message of ${res.message.length} characters`);
    return `${message.length} characters both ways`;
  });

  await run("server-stream", async () => {
    const got: { header?: Headers; trailer?: Headers } = {};
    const messages: string[] = [];
    for await (const res of client.serverStreamingEcho({ message: "tick" }, callOptions(got))) {
      messages.push(res.message);
    }
    expect(messages.join("|") === "tick 1|tick 2|tick 3|tick 4|tick 5", `messages ${JSON.stringify(messages)}`);
    return `${JSON.stringify(messages)}; ${checkMetadata(got.header, got.trailer, protocol)}`;
  });

  await run("unary-error", async () => {
    const err = await failureOf(() => client.unaryEcho({ message: "fail" }, callOptions({})));
    return checkFailure(err, protocol);
  });

  await run("server-stream-error", async () => {
    const messages: string[] = [];
    const err = await failureOf(async () => {
      for await (const res of client.serverStreamingEcho({ message: "fail" }, callOptions({}))) {
        messages.push(res.message);
      }
    });
    expect(messages.join("|") === "fail 1|fail 2", `messages before the error ${JSON.stringify(messages)}`);
    return `${JSON.stringify(messages)} then ${checkFailure(err, protocol)}`;
  });

  await run("concurrent", async () => {
    // More calls at once than a browser opens HTTP/1.1 connections to a
    // server (six): the others queue for a connection.
    const messages = Array.from({ length: 24 }, (_, i) => `call ${i}`);
    const answers = await Promise.all(messages.map((message) => client.unaryEcho({ message }, { timeoutMs })));
    const wrong = answers.filter((res, i) => res.message !== messages[i]);
    expect(wrong.length === 0, `${wrong.length} wrong answers: ${JSON.stringify(wrong.map((r) => r.message))}`);
    return `${answers.length} calls at once`;
  });

  await run("cancel", async () => {
    // The client cancels a server stream it has read two messages of (the
    // server sends one every 100 ms); the server can still be called.
    const abort = new AbortController();
    const messages: string[] = [];
    const err = await failureOf(async () => {
      for await (const res of client.serverStreamingEcho({ message: "slow" }, { timeoutMs, signal: abort.signal })) {
        messages.push(res.message);
        if (messages.length === 2) abort.abort();
      }
    });
    expect(err.code === Code.Canceled, `code ${Code[err.code]} (${err.message})`);
    expect(messages.join("|") === "slow 1|slow 2", `messages ${JSON.stringify(messages)}`);
    const res = await client.unaryEcho({ message: "after" }, { timeoutMs });
    expect(res.message === "after", `the call after: ${JSON.stringify(res.message)}`);
    return `${JSON.stringify(messages)} then ${Code[err.code]}; a call after it answered`;
  });

  return checks;
}

// suites runs the suite through every transport against baseUrl, into
// out, calling progress after each transport.
async function suites(baseUrl: string, out: Record<string, Checks>, progress: () => void): Promise<void> {
  for (const [name, t] of Object.entries(transports)) {
    out[name] = await suite(createClient(Echo, t.make(baseUrl)), t.protocol);
    progress();
  }
}

// refused checks that a server of another origin that does not allow this
// page's gives it nothing to read: the browser fails the call.
async function refused(baseUrl: string): Promise<Checks> {
  const out: Checks = {};
  for (const [name, t] of Object.entries(transports)) {
    try {
      const err = await failureOf(() => createClient(Echo, t.make(baseUrl)).unaryEcho({ message: "hi" }, { timeoutMs }));
      out[name] = { ok: true, detail: `refused: ${Code[err.code]} ${err.rawMessage}` };
    } catch (e) {
      out[name] = { ok: false, detail: String(e) };
    }
  }
  return out;
}

type Results = {
  origin: string;
  // The HTTP versions the browser used, by origin (nextHopProtocol of the
  // page's resource timings: "http/1.1", "h2"; empty where a server of
  // another origin does not let the page see it).
  httpVersions: Record<string, string[]>;
  suites: Record<string, Record<string, Checks>>;
  refused?: Checks;
  passed: number;
  failed: number;
  done: boolean;
  error?: string;
};

function show(results: Results): void {
  const list = document.getElementById("list")!;
  list.replaceChildren();
  const add = (label: string, c: Check) => {
    const li = document.createElement("li");
    li.className = c.ok ? "ok" : "fail";
    li.textContent = `${c.ok ? "✓" : "✗"} ${label}: ${c.detail}`;
    list.append(li);
  };
  for (const [where, byTransport] of Object.entries(results.suites)) {
    for (const [transport, checks] of Object.entries(byTransport)) {
      for (const [name, c] of Object.entries(checks)) add(`${where} ${transport} ${name}`, c);
    }
  }
  for (const [transport, c] of Object.entries(results.refused ?? {})) add(`refused ${transport}`, c);
  document.getElementById("status")!.textContent = results.done
    ? `done: ${results.passed} passed, ${results.failed} failed`
    : "running…";
  document.getElementById("results")!.textContent = JSON.stringify(results, null, 1);
}

async function main(): Promise<void> {
  const params = new URLSearchParams(location.search);
  const results: Results = { origin: location.origin, httpVersions: {}, suites: {}, passed: 0, failed: 0, done: false };
  performance.setResourceTimingBufferSize(5000);
  try {
    const progress = () => show(results);
    await suites(location.origin, (results.suites["same-origin"] = {}), progress);
    const cross = params.get("cross");
    if (cross) await suites(cross, (results.suites["cross-origin"] = {}), progress);
    const refuse = params.get("refuse");
    if (refuse) results.refused = await refused(refuse);
  } catch (e) {
    results.error = String(e);
  }
  const all = [
    ...Object.values(results.suites).flatMap((byTransport) => Object.values(byTransport).flatMap((c) => Object.values(c))),
    ...Object.values(results.refused ?? {}),
  ];
  results.passed = all.filter((c) => c.ok).length;
  results.failed = all.length - results.passed;
  for (const e of performance.getEntriesByType("resource") as PerformanceResourceTiming[]) {
    const origin = new URL(e.name).origin;
    const versions = (results.httpVersions[origin] ??= []);
    if (e.nextHopProtocol && !versions.includes(e.nextHopProtocol)) versions.push(e.nextHopProtocol);
  }
  results.done = true;
  show(results);
  document.title = results.failed === 0 && !results.error ? "passed" : "failed";
  const report = params.get("report");
  if (report) {
    await fetch(new URL(report, location.origin), { method: "POST", body: document.getElementById("results")!.textContent });
  }
}

main();
