// An official TypeScript SDK client, 1.x (@modelcontextprotocol/sdk, the 2025-11-25
// initialize handshake) or v2 (@modelcontextprotocol/client, versionNegotiation 'auto': a
// server/discover probe, then 2026-07-28), using a `trunkline serve --http` gateway as
// several users in turn, each with its own credential: what each is listed, and what each
// call gets. Prints one JSON line: {"sdk", "users": [{"era", "protocol", "tools", "calls"}]},
// each call's {"result": ...} or, when the SDK threw a JSON-RPC error, {"error": {"code",
// "message", "data"}} (the message as the SDK has it: 1.x puts "MCP error CODE: " before
// the server's).
//
//   node --input-type=module < ts_policy.mjs   run in .peers/ts-client (where the SDKs are
//                                              installed), with TS_POLICY_URL,
//                                              TS_POLICY_MAJOR (1 or 2) and TS_POLICY_PLAN
//                                              ([{"bearer", "calls": [[TOOL, ARGS], ...]}])
//
// Every request of a user carries `Authorization: Bearer <bearer>` (the transport's
// requestInit headers). Read from stdin, an ES module resolves its imports from the working
// directory, so this file needs no copy beside the installed SDKs (as ts_read.mjs).

import { readFileSync } from 'node:fs';

const PACKAGES = { 1: '@modelcontextprotocol/sdk', 2: '@modelcontextprotocol/client' };
const major = process.env.TS_POLICY_MAJOR;
const url = new URL(process.env.TS_POLICY_URL);
const plan = JSON.parse(process.env.TS_POLICY_PLAN);
const CLIENT_INFO = { name: 'trunkline-ts-policy', version: '0.0.0' };

async function sdk() {
    if (major === '2') {
        const { Client, StreamableHTTPClientTransport } = await import(
            '@modelcontextprotocol/client'
        );
        return {
            client: () => new Client(CLIENT_INFO, { versionNegotiation: { mode: 'auto' } }),
            Transport: StreamableHTTPClientTransport,
            era: (client) => client.getProtocolEra() ?? null,
            protocol: (client) => client.getNegotiatedProtocolVersion() ?? null
        };
    }
    const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
    const { StreamableHTTPClientTransport } = await import(
        '@modelcontextprotocol/sdk/client/streamableHttp.js'
    );
    return {
        client: () => new Client(CLIENT_INFO),
        Transport: StreamableHTTPClientTransport,
        era: () => 'legacy',
        // 1.x has no getter: the transport is told the negotiated version (ts_client.mjs).
        protocol: (_client, transport) => transport.protocolVersion ?? null
    };
}

async function listAllTools(client) {
    const names = [];
    let cursor;
    do {
        const page = await client.listTools(cursor === undefined ? undefined : { cursor });
        names.push(...page.tools.map((t) => t.name));
        cursor = page.nextCursor;
    } while (cursor !== undefined);
    return names;
}

async function asUser(use, user) {
    const transport = new use.Transport(url, {
        requestInit: { headers: { Authorization: `Bearer ${user.bearer}` } }
    });
    const client = use.client();
    await client.connect(transport);
    try {
        const tools = await listAllTools(client);
        const calls = [];
        for (const [name, args] of user.calls) {
            try {
                calls.push({ result: await client.callTool({ name, arguments: args }) });
            } catch (error) {
                if (typeof error?.code !== 'number') throw error; // not a JSON-RPC error
                calls.push({
                    error: { code: error.code, message: error.message, data: error.data ?? null }
                });
            }
        }
        return { era: use.era(client), protocol: use.protocol(client, transport), tools, calls };
    } finally {
        await client.close();
    }
}

const use = await sdk();
const users = [];
for (const user of plan) {
    users.push(await asUser(use, user));
}
const version = JSON.parse(
    readFileSync(`node_modules/${PACKAGES[major]}/package.json`, 'utf8')
).version;
process.stdout.write(JSON.stringify({ sdk: version, users }) + '\n');
