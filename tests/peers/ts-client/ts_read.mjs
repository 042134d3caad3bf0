// The official TypeScript SDK v2 client (@modelcontextprotocol/client, version negotiation
// 'auto': a server/discover probe, then 2026-07-28) reading one resource from a Streamable
// HTTP server (here: `trunkline serve --http`). Prints one JSON line: {"sdk", "era",
// "protocol", "result"} or, when the SDK refused what came back, {"sdk", "era", "protocol",
// "error"} (its message).
//
//   node --input-type=module < ts_read.mjs   with TS_READ_URL and TS_READ_URI set, run in
//                                            .peers/ts-client (where the SDK is installed)
//
// Read from stdin, an ES module resolves its imports from the working directory, so this
// file needs no copy beside the installed SDK (ts_client.mjs does).

import { readFileSync } from 'node:fs';

const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
const sdk = JSON.parse(
    readFileSync('node_modules/@modelcontextprotocol/client/package.json', 'utf8')
).version;
const client = new Client(
    { name: 'trunkline-ts-read', version: '0.0.0' },
    { versionNegotiation: { mode: 'auto' } }
);
await client.connect(new StreamableHTTPClientTransport(new URL(process.env.TS_READ_URL)));
const done = {
    sdk,
    era: client.getProtocolEra() ?? null,
    protocol: client.getNegotiatedProtocolVersion() ?? null
};
try {
    done.result = await client.readResource({ uri: process.env.TS_READ_URI });
} catch (error) {
    done.error = String(error?.message ?? error);
} finally {
    await client.close();
}
process.stdout.write(JSON.stringify(done) + '\n');
