// An official TypeScript SDK client, 1.x (@modelcontextprotocol/sdk) or v2
// (@modelcontextprotocol/client), against a stdio server (here: `trunkline serve --stdio`)
// or a Streamable HTTP one (`trunkline serve --http`). Prints one JSON line.
//
//   node ts_client.mjs 1 TOOL ARGS_JSON -- COMMAND ARG...
//   node ts_client.mjs 2 TOOL ARGS_JSON -- http://HOST:PORT/mcp
//
// It lists the tools (every page), calls TOOL with ARGS_JSON with a progress handler, and
// prints {"sdk", "era", "protocol", "tools", "result", "progress", "wire"}: the TypeScript
// twin of tests/peers/sdk_client.py. v2 connects with versionNegotiation mode 'auto' (a
// server/discover probe first; on stdio the SDK probes on a short-lived sibling process);
// 1.x runs the initialize handshake.
//
// "progress" is what the SDK handed the onprogress handler; "wire" is what the transport
// carried for the call: the progressToken the SDK put on it and every notifications/progress
// that arrived while it was open. Both are needed because both SDK majors drop progress that
// is read in the same chunk as the call's response (the response is dispatched at once, a
// notification a microtask later, by which time the handler is gone:
// modelcontextprotocol/typescript-sdk#2580), which on stdio is the usual case.
//
// With TS_CLIENT_ANSWERS in its environment (a JSON object: request method -> the result to
// give), the client declares the matching capabilities (elicitation/create: elicitation,
// sampling/createMessage: sampling) and answers each such request of the server's with that
// result; the document's "asked" lists them ([method, params], in the order they came).
//
// .ci/install-peers copies this file next to its node_modules under .peers/ts-client/ (ESM
// resolves packages relative to the importing file); tests/gateway/test_serve_ts_clients.py
// runs that copy. The COMMAND gets this process's environment, so the test decides it.

import { readFileSync } from 'node:fs';

const PACKAGES = { 1: '@modelcontextprotocol/sdk', 2: '@modelcontextprotocol/client' };

function parse(argv) {
    const split = argv.indexOf('--');
    if (split !== 3 || argv.length < 5 || !(argv[0] in PACKAGES)) {
        process.stderr.write('usage: ts_client.mjs {1|2} TOOL ARGS_JSON -- COMMAND ARG... | URL\n');
        process.exit(2);
    }
    const [command, ...args] = argv.slice(split + 1);
    return { major: argv[0], tool: argv[1], toolArgs: JSON.parse(argv[2]), command, args };
}

function installedVersion(pkg) {
    // The package's own package.json, read from disk: its "exports" map does not expose it.
    const url = new URL(`./node_modules/${pkg}/package.json`, import.meta.url);
    return JSON.parse(readFileSync(url, 'utf8')).version;
}

const isUrl = (target) => /^https?:\/\//.test(target);
const CLIENT_INFO = { name: 'trunkline-ts-client', version: '0.0.0' };

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

// Watch one transport's traffic for the tools/call: the token it went out with, and the
// progress notifications read before its response. Installed after connect(), so it sees what
// the SDK's own onmessage is about to see, in the same order.
function watchCall(transport) {
    const wire = { token: null, progress: [] };
    let callId;
    let open = false;
    const send = transport.send.bind(transport);
    transport.send = (message, options) => {
        if (message.method === 'tools/call') {
            callId = message.id;
            open = true;
            wire.token = message.params?._meta?.progressToken ?? null;
        }
        return send(message, options);
    };
    const deliver = transport.onmessage;
    transport.onmessage = (message, extra) => {
        if (open && message.method === 'notifications/progress') {
            wire.progress.push(message.params);
        } else if (open && message.method === undefined && message.id === callId) {
            open = false;
        }
        deliver?.(message, extra);
    };
    return wire;
}

const progressOf = (p) => [p.progress, p.total ?? null, p.message ?? null];

// The canned answers (TS_CLIENT_ANSWERS), the capabilities they need, and what was asked.
const ANSWERS = JSON.parse(process.env.TS_CLIENT_ANSWERS ?? '{}');
const CAPABILITY_OF = { 'elicitation/create': 'elicitation', 'sampling/createMessage': 'sampling' };
const asked = [];

function capabilities() {
    const declared = {};
    for (const method of Object.keys(ANSWERS)) {
        if (!(method in CAPABILITY_OF)) {
            process.stderr.write(`TS_CLIENT_ANSWERS: cannot answer ${method}\n`);
            process.exit(2);
        }
        declared[CAPABILITY_OF[method]] = {};
    }
    return declared;
}

// Install the handlers with setRequestHandler(key, handler): v2 keys by method, 1.x by schema.
function answering(client, keyOf) {
    for (const [method, result] of Object.entries(ANSWERS)) {
        client.setRequestHandler(keyOf(method), async (request) => {
            asked.push([method, request.params]);
            return result;
        });
    }
}

async function modern({ tool, toolArgs, command, args }) {
    const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
    const { StdioClientTransport } = await import('@modelcontextprotocol/client/stdio');
    const transport = isUrl(command)
        ? new StreamableHTTPClientTransport(new URL(command))
        : new StdioClientTransport({ command, args, env: { ...process.env } });
    const client = new Client(CLIENT_INFO, {
        versionNegotiation: { mode: 'auto' },
        capabilities: capabilities()
    });
    answering(client, (method) => method);
    const progress = [];
    await client.connect(transport);
    try {
        const wire = watchCall(transport);
        const tools = await listAllTools(client);
        const result = await client.callTool(
            { name: tool, arguments: toolArgs },
            { onprogress: (p) => progress.push(progressOf(p)) }
        );
        return {
            era: client.getProtocolEra() ?? null,
            protocol: client.getNegotiatedProtocolVersion() ?? null,
            tools,
            result,
            progress,
            wire,
            asked
        };
    } finally {
        await client.close();
    }
}

async function legacy({ tool, toolArgs, command, args }) {
    const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
    const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');
    const { StreamableHTTPClientTransport } = await import(
        '@modelcontextprotocol/sdk/client/streamableHttp.js'
    );
    const transport = isUrl(command)
        ? new StreamableHTTPClientTransport(new URL(command))
        : new StdioClientTransport({ command, args, env: { ...process.env } });
    // 1.x has no getter for the negotiated version: Client.connect hands the validated
    // InitializeResult.protocolVersion to transport.setProtocolVersion when the transport has
    // one (the HTTP one does, the stdio one does not), so record it there.
    let negotiated = null;
    const forward = transport.setProtocolVersion?.bind(transport);
    transport.setProtocolVersion = (version) => {
        negotiated = version;
        forward?.(version);
    };
    const { CreateMessageRequestSchema, ElicitRequestSchema } = await import(
        '@modelcontextprotocol/sdk/types.js'
    );
    const schemas = {
        'elicitation/create': ElicitRequestSchema,
        'sampling/createMessage': CreateMessageRequestSchema
    };
    const client = new Client(CLIENT_INFO, { capabilities: capabilities() });
    answering(client, (method) => schemas[method]);
    const progress = [];
    await client.connect(transport);
    try {
        const wire = watchCall(transport);
        const tools = await listAllTools(client);
        const result = await client.callTool({ name: tool, arguments: toolArgs }, undefined, {
            onprogress: (p) => progress.push(progressOf(p))
        });
        return { era: 'legacy', protocol: negotiated, tools, result, progress, wire, asked };
    } finally {
        await client.close();
    }
}

const request = parse(process.argv.slice(2));
const run = request.major === '2' ? modern : legacy;
const done = await run(request);
process.stdout.write(
    JSON.stringify({ sdk: installedVersion(PACKAGES[request.major]), ...done }) + '\n'
);
