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
//   count  {n: int}                       -> n progress notifications (progress i, total n,
//                                            message "step <i>") on the call's progressToken
//                                            via ctx.mcpReq.notify, then "counted <n>"
//   ask_name {}                           -> multi round-trip: round 1 answers
//                                            inputRequired({inputRequests:{name: elicit form
//                                            {name}}, requestState:"ask_name/1"}); the retry
//                                            (acceptedContent + ctx.mcpReq.requestState())
//                                            answers "hello <name>" (+ " state=<echoed state>")
//   add_tool {name: string}               -> registers tool <name> (returns "<name> here") on
//                                            this connection's instance; McpServer.registerTool
//                                            emits notifications/tools/list_changed, which the
//                                            stdio entry routes onto subscriptions/listen streams

import { McpServer, acceptedContent, inputRequired } from '@modelcontextprotocol/server';
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

    server.registerTool(
        'count',
        {
            description: 'Send n progress notifications, then answer',
            inputSchema: z.object({ n: z.number().int().min(0).max(100) })
        },
        async ({ n }, ctx) => {
            const token = ctx.mcpReq._meta?.progressToken;
            for (let i = 1; i <= n; i++) {
                if (token !== undefined) {
                    await ctx.mcpReq.notify({
                        method: 'notifications/progress',
                        params: { progressToken: token, progress: i, total: n, message: `step ${i}` }
                    });
                }
            }
            return { content: [{ type: 'text', text: `counted ${n}` }] };
        }
    );

    const nameSchema = z.object({ name: z.string() });
    server.registerTool(
        'ask_name',
        {
            description: 'Ask the client for a name (form elicitation via input_required), then greet it',
            inputSchema: z.object({})
        },
        async (_args, ctx) => {
            const answer = acceptedContent(ctx.mcpReq.inputResponses, 'name', nameSchema);
            if (answer === undefined) {
                return inputRequired({
                    inputRequests: {
                        name: inputRequired.elicit({ message: 'What is your name?', requestedSchema: nameSchema })
                    },
                    requestState: 'ask_name/1'
                });
            }
            const state = ctx.mcpReq.requestState();
            return { content: [{ type: 'text', text: `hello ${answer.name} state=${state}` }] };
        }
    );

    server.registerTool(
        'add_tool',
        {
            description: 'Register a new tool <name> on this connection (the tool list changes)',
            inputSchema: z.object({ name: z.string().regex(/^[a-z][a-z0-9_]{0,31}$/) })
        },
        async ({ name }) => {
            if (!server.isConnected()) throw new Error('not connected');
            server.registerTool(
                name,
                { description: `Added at runtime by add_tool`, inputSchema: z.object({}) },
                async () => ({ content: [{ type: 'text', text: `${name} here` }] })
            );
            return { content: [{ type: 'text', text: `added ${name}` }] };
        }
    );

    return server;
}

serveStdio(() => makeServer(), {
    legacy,
    onerror: (err) => process.stderr.write(`ts-modern: ${err.message}\n`)
});
