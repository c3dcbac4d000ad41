// One POST with Node's built-in fetch and nothing else: the proxy comes from
// HTTP_PROXY/HTTPS_PROXY only because NODE_USE_ENV_PROXY=1 (Node 24 and later), the
// extra CA from NODE_EXTRA_CA_CERTS. Same arguments and output as fetch_client.mjs.
const [url, headersJson] = process.argv.slice(2);
const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const response = await fetch(url, {
  method: "POST",
  headers: JSON.parse(headersJson),
  body: Buffer.concat(chunks),
});
const body = Buffer.from(await response.arrayBuffer());
process.stdout.write(
  JSON.stringify({
    status: response.status,
    headers: [...response.headers.entries()],
    body_b64: body.toString("base64"),
  }),
);
