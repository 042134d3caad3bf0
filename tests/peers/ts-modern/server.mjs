// A small modern (2026-07-28) MCP stdio server for the trunkline test suite,
// built on the official TypeScript SDK v2 (@modelcontextprotocol/server 2.4.0).
//
// Plain ESM JavaScript on purpose: Node 20 cannot run .ts directly and a
// TypeScript compile step buys nothing for ~60 lines. The SDK is the thing
// under test, not our typing.
//
// .ci/install-peers copies this file next to its node_modules under
// .peers/ts-modern/ (ESM resolves packages relative to the importing file);
// tests/realpeers.py spawns that copy.
//
// Usage: node server.mjs [--legacy=serve|reject]
//   serve  (default) dual-era: a 2025-era `initialize` opening is served by a
//          legacy instance from the same factory.
//   reject modern-only: 2025-era openings get the SDK's unsupported-version
//          rejection.
//
// Tools:
//   echo   {text: string}                 -> text content equal to `text`
//   search {query: string, limit?: int}   -> `limit` (default 3, max 10) text
//                                            hits "<query> result <n>", plus
//                                            structuredContent {query, hits}
//   sleep  {ms: int}                      -> waits ms (max 60000), then "slept <ms>"

import { McpServer } from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';
import { z } from 'zod';

const legacyArg = process.argv.find((a) => a.startsWith('--legacy='));
const legacy = legacyArg ? legacyArg.slice('--legacy='.length) : 'serve';
if (legacy !== 'serve' && legacy !== 'reject') {
    process.stderr.write(`ts-modern: bad --legacy=${legacy} (want serve|reject)\n`);
    process.exit(2);
}

function makeServer() {
    const server = new McpServer(
        { name: 'trunkline-ts-modern', version: '0.1.0' },
        { capabilities: { tools: {} } }
    );

    server.registerTool(
        'echo',
        {
            description: 'Return the input text unchanged',
            inputSchema: z.object({ text: z.string() })
        },
        async ({ text }) => ({ content: [{ type: 'text', text }] })
    );

    server.registerTool(
        'search',
        {
            description: 'Fake search: returns numbered hits for the query',
            inputSchema: z.object({
                query: z.string(),
                limit: z.number().int().min(1).max(10).optional()
            }),
            outputSchema: z.object({ query: z.string(), hits: z.array(z.string()) })
        },
        async ({ query, limit }) => {
            const hits = Array.from({ length: limit ?? 3 }, (_, i) => `${query} result ${i + 1}`);
            return {
                content: hits.map((h) => ({ type: 'text', text: h })),
                structuredContent: { query, hits }
            };
        }
    );

    server.registerTool(
        'sleep',
        {
            description: 'Wait the given number of milliseconds, then answer',
            inputSchema: z.object({ ms: z.number().int().min(0).max(60000) })
        },
        async ({ ms }) => {
            await new Promise((resolve) => setTimeout(resolve, ms));
            return { content: [{ type: 'text', text: `slept ${ms}` }] };
        }
    );

    return server;
}

serveStdio(() => makeServer(), {
    legacy,
    onerror: (err) => process.stderr.write(`ts-modern: ${err.message}\n`)
});
