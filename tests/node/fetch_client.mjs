// One HTTP(S) request with Node's fetch, configured only by the environment.
// `node fetch_client.mjs URL HEADERS_JSON` with the body on stdin; prints
// {"status", "headers", "body_b64"}. The proxy comes from HTTPS_PROXY through undici's
// EnvHttpProxyAgent (Node 20's built-in fetch has no proxy support; NODE_USE_ENV_PROXY
// arrived in later Node versions), the extra CA from NODE_EXTRA_CA_CERTS. With
// FETCH=builtin it is Node's own fetch with no dispatcher at all, as an agent that only
// points its base URL at the sidecar (reverse mode) sends it.
import { EnvHttpProxyAgent, fetch as undiciFetch } from "undici";

const builtin = process.env.FETCH === "builtin";
const fetch = builtin ? globalThis.fetch : undiciFetch;

const [url, headersJson] = process.argv.slice(2);
const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const response = await fetch(url, {
  method: "POST",
  headers: JSON.parse(headersJson),
  body: Buffer.concat(chunks),
  ...(builtin ? {} : { dispatcher: new EnvHttpProxyAgent() }),
});
const body = Buffer.from(await response.arrayBuffer());
process.stdout.write(
  JSON.stringify({
    status: response.status,
    headers: [...response.headers.entries()],
    body_b64: body.toString("base64"),
  }),
);
