"""The MCP conformance suite's "everything server", ours, on the official Python SDK 2.x.

The official conformance harness (@modelcontextprotocol/conformance, pinned in
tests/conformance/harness) scores a *server* by connecting to it and using fixture tools,
prompts and resources with fixed names (its "everything server" contract). This module is
that fixture, written for trunkline on PyPI mcp 2.3.0 (MCPServer), so that
tests/conformance/run_server.sh can run every server scenario against it directly and
through `trunkline serve` (where it is the one stdio upstream). Runs in the
.peers/py-modern venv:

    .peers/py-modern/bin/python tests/peers/conformance_everything.py --http 127.0.0.1:0
    .peers/py-modern/bin/python tests/peers/conformance_everything.py --stdio

--http HOST:PORT  Streamable HTTP at /mcp (dual-era: 2026-07-28 stateless requests and the
                  2025-11-25 initialize + Mcp-Session-Id transport), 127.0.0.1 only, with
                  the SDK's Host/Origin (DNS rebinding) checks, an in-memory SSE event store
                  and a 100 ms retry hint (SSE polling, SEP-1699). Prints
                  ``LISTENING http://127.0.0.1:<port>/mcp`` (flushed) once it accepts
                  connections; PORT 0 picks a free port. Runs until SIGTERM/SIGINT.
--stdio           one JSON-RPC message per line on stdin/stdout (dual-era as well).

The contract (names, arguments and behaviour are what the harness's scenarios check):

tools      test_simple_text, test_image_content (1x1 PNG), test_audio_content (WAV),
           test_embedded_resource, test_multiple_content_types, test_error_handling
           (isError), test_tool_with_logging (3 info logs, 50 ms apart),
           test_tool_with_progress (progress 0, 50, 100 of 100), test_sampling {prompt},
           test_elicitation {message}, test_elicitation_sep1034_defaults and
           test_elicitation_sep1330_enums (dual-era: a server->client request during the
           call at 2025-11-25; at 2026-07-28, where a server has no back-channel, an
           InputRequiredResult, finished on the retry with inputResponses + requestState),
           test_reconnection (closes the call's SSE stream mid-call), test_logging_tool (one
           log per level) and test_streaming_elicitation (elicits in the era's way), which
           server-stateless calls, json_schema_2020_12_tool
           (a hand-written 2020-12 inputSchema), test_mcp_param_header {region} (x-mcp-header
           Region, SEP-2243), test_missing_capability (-32021 unless the request declares
           sampling), test_trigger_tool_change / test_trigger_prompt_change (list-changed on
           subscriptions/listen, SEP-2575)
mrtr       (2026-07-28 InputRequiredResult, SEP-2322) test_input_required_result_elicitation,
           _sampling, _list_roots, _request_state, _multiple_inputs, _multi_round,
           _tampered_state, _capabilities, and the prompt test_input_required_result_prompt.
           requestState is sealed and checked by the SDK (an ephemeral key per process), so
           a tampered echo is refused before a handler runs.
prompts    test_simple_prompt, test_prompt_with_arguments {arg1, arg2},
           test_prompt_with_embedded_resource {resourceUri}, test_prompt_with_image
resources  test://static-text, test://static-binary (PNG blob), test://watched-resource,
           template test://template/{id}/data (JSON naming the id)
other      completion/complete (prefix-filtered suggestions), and the 2025-11-25-only
           logging/setLevel (filters this fixture's log notifications per session) and
           resources/subscribe / resources/unsubscribe.

The extensions, declared in server/discover's capabilities.extensions (the harness's
extension scenarios, run at 2026-07-28):

tasks      io.modelcontextprotocol/tasks (SEP-2663, tasks_extension.py): a request naming
           it in its clientCapabilities may be answered with a task, then tasks/get,
           tasks/update, tasks/cancel. Task tools: slow_compute {seconds, label} (optional:
           without a task it works within the call), failing_job (required; a tool error
           after ~1 s: a completed task with isError), protocol_error_job (optional; a
           JSON-RPC error: a failed task), confirm_delete {filename} and multi_input (optional;
           ask one and two questions: input_required and tasks/update as a task,
           InputRequiredResult without one), test_tool_with_task (required; asks for a name
           by InputRequiredResult, then becomes a task greeting it). greet {name} is never
           a task.
skills     io.modelcontextprotocol/skills (SEP-2640, skills_extension.py, directoryRead):
           skill://fixture-tasks/SKILL.md and skill://fixture-tasks/references/TASKS.md,
           with skills/list, skills/get and resources/directory/read.
apps       io.modelcontextprotocol/ui (MCP Apps, the SDK's mcp.server.apps): test_app_tool,
           whose _meta.ui.resourceUri is ui://trunkline-conformance/app.html, served as
           text/html;profile=mcp-app.
"""

# No `from __future__ import annotations`: MCPServer reads the tools' annotations at
# registration to find their Context parameter and build their input schemas.
import argparse
import asyncio
import base64
import io
import itertools
import json
import struct
import sys
import warnings
import wave
import zlib
from collections import deque
from typing import Annotated, Any

from mcp import types
from mcp.server import ServerRequestContext
from mcp.server.apps import Apps
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts.base import Prompt
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.version import is_version_at_least
from pydantic import BaseModel, Field

# sibling modules (this script's directory is sys.path[0])
from skills_extension import Skill, Skills
from tasks_extension import Tasks, await_input, detach, in_task

# The fixture serves the 2025-11-25 features 2026-07-28 deprecates (logging, roots,
# setLevel) on purpose; the SDK's deprecation warnings would only clutter stderr.
warnings.simplefilter("ignore", MCPDeprecationWarning)

NAME = "trunkline-conformance-everything"


# ---- media: made here, not pasted, so the bytes are known to be what they claim ----------

def one_pixel_png() -> bytes:
    """A valid 1x1 red PNG (8-bit RGB, one unfiltered scanline)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b""))


def short_silence_wav() -> bytes:
    """A valid WAV file: 1 ms of 8 kHz mono 16-bit silence."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"\x00\x00" * 8)
    return out.getvalue()


PNG = one_pixel_png()
PNG_B64 = base64.b64encode(PNG).decode()
WAV_B64 = base64.b64encode(short_silence_wav()).decode()


# ---- requests a tool sends the client, and reading its answers ----------------------------

def string_form(field: str, kind: str = "string") -> dict[str, Any]:
    return {"type": "object", "properties": {field: {"type": kind}}, "required": [field]}


def ask(message: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"method": "elicitation/create",
            "params": {"message": message, "requestedSchema": schema}}


def sample(text: str, max_tokens: int) -> dict[str, Any]:
    return {"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        "maxTokens": max_tokens}}


LIST_ROOTS = {"method": "roots/list", "params": {}}


def input_required(requests: dict[str, dict[str, Any]],
                   state: str | None = None) -> types.InputRequiredResult:
    wire: dict[str, Any] = {"resultType": "input_required", "inputRequests": requests}
    if state is not None:
        wire["requestState"] = state
    return types.InputRequiredResult.model_validate(wire)


def accepted_field(ctx: Context, key: str, field: str) -> str | None:
    """The string `field` of an accepted elicitation answered under `key`, else None (no
    answer, a declined one, or an answer of the wrong kind: each is asked again)."""
    answer = (ctx.input_responses or {}).get(key)
    if isinstance(answer, types.ElicitResult) and answer.action == "accept":
        value = (answer.content or {}).get(field)
        if isinstance(value, str):
            return value
    return None


def sampled_text(ctx: Context, key: str) -> str | None:
    answer = (ctx.input_responses or {}).get(key)
    if isinstance(answer, types.CreateMessageResult) and answer.content.type == "text":
        return answer.content.text
    return None


def listed_roots(ctx: Context, key: str) -> list[str] | None:
    answer = (ctx.input_responses or {}).get(key)
    if isinstance(answer, types.ListRootsResult):
        return [str(root.uri) for root in answer.roots]
    return None


NAME_QUESTION = ask("What is your name?", string_form("name"))


# ---- extensions: tasks (SEP-2663), skills (SEP-2640) and apps (io.modelcontextprotocol/ui) --
#
# Declared in server/discover's capabilities.extensions. Their tools and resources are
# contributed through the SDK's extension interface, so they are defined before the server.

tasks = Tasks()


@tasks.tool(support="optional", description="Works `seconds` seconds, then answers; runs as "
                                            "a task when the request allows one")
async def slow_compute(seconds: float = 1.0, label: str = "") -> str:
    detach()
    await asyncio.sleep(seconds)
    return f"computed {label or 'nothing'} in {seconds:g} s"


@tasks.tool(support="required", description="Works about a second as a task, then reports a "
                                            "tool error (isError: a completed task)")
async def failing_job() -> str:
    detach()
    await asyncio.sleep(1)
    raise ToolError("failing_job fails, as it always does")


@tasks.tool(support="optional", description="Raises a JSON-RPC error (a failed task, or the "
                                            "request's error without one)")
async def protocol_error_job() -> str:
    detach()
    await asyncio.sleep(0.1)
    raise MCPError(code=types.INTERNAL_ERROR, message="protocol_error_job broke, on purpose")


async def answers(ctx: Context, requests: dict[str, Any]) -> dict[str, Any] | None:
    """The client's answers to `requests` as JSON objects: asked through the task
    (input_required, answered by tasks/update) when the call runs as one, else by
    InputRequiredResult (None: return it, until a retry brings every answer)."""
    if in_task():
        return await await_input(requests)
    retried = ctx.input_responses or {}
    if not all(key in retried for key in requests):
        return None
    return {key: retried[key].model_dump(by_alias=True, mode="json", exclude_none=True)
            for key in requests}


def accepted(answer: Any, field: str) -> Any:
    """`field` of an accepted elicitation answer, else None."""
    if isinstance(answer, dict) and answer.get("action") == "accept":
        return (answer.get("content") or {}).get(field)
    return None


@tasks.tool(support="optional", description="Asks whether to delete filename (as a task: "
                                            "input_required), then answers")
async def confirm_delete(filename: str, ctx: Context) -> str | types.InputRequiredResult:
    detach()
    question = {"confirm": ask(f"Delete {filename}?", string_form("confirm", "boolean"))}
    replies = await answers(ctx, question)
    if replies is None:
        return input_required(question)
    return f"deleted {filename}" if accepted(replies["confirm"], "confirm") is True \
        else f"kept {filename}"


@tasks.tool(support="optional", description="Asks two questions at once (as a task: "
                                            "input_required), then answers with both replies")
async def multi_input(ctx: Context) -> str | types.InputRequiredResult:
    detach()
    questions = {"name": NAME_QUESTION,
                 "proceed": ask("Proceed?", string_form("confirm", "boolean"))}
    replies = await answers(ctx, questions)
    if replies is None:
        return input_required(questions)
    return f"name={accepted(replies['name'], 'name')}, " \
           f"proceed={accepted(replies['proceed'], 'confirm')}"


@tasks.tool(support="required", description="Asks for a name by InputRequiredResult, then "
                                            "greets as a task")
async def test_tool_with_task(ctx: Context) -> str | types.InputRequiredResult:
    name = accepted_field(ctx, "user_name", "name")
    if name is None:
        return input_required({"user_name": NAME_QUESTION})
    detach()
    await asyncio.sleep(0.2)
    return f"Hello, {name}! (from a task)"


skills = Skills([Skill(
    {"name": "fixture-tasks",
     "description": "Run this server's task tools and follow a task to its end with "
                    "tasks/get, tasks/update and tasks/cancel."},
    "# Tasks on this server\n\nCall `slow_compute` with the tasks extension declared: the "
    "answer is a task. Poll it with `tasks/get` until it is completed; "
    "[references/TASKS.md](references/TASKS.md) lists every task tool.\n",
    {"references/TASKS.md": "# Task tools\n\n- `slow_compute`: optional\n"
                            "- `failing_job`, `confirm_delete`, `multi_input`, "
                            "`test_tool_with_task`: required\n"
                            "- `protocol_error_job`: optional\n"})])

APP_URI = "ui://trunkline-conformance/app.html"
apps = Apps()


@apps.tool(resource_uri=APP_URI, description="Answers with text; a host with MCP Apps "
                                              "renders its UI resource too")
def test_app_tool() -> str:
    return "This tool's UI is the ui:// resource named in its _meta.ui.resourceUri."


apps.add_html_resource(APP_URI, "<!doctype html><title>test app</title><p>test app</p>\n",
                       name="test-app", description="The UI of test_app_tool")


# ---- the server -------------------------------------------------------------------------

class EverythingServer(MCPServer):
    """MCPServer whose tools/list may carry an inputSchema written by hand.

    MCPServer derives every inputSchema from the function signature; the 2020-12 keyword
    test needs `$defs`/`$anchor`/`if`/`then`/`else`, which no signature produces.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.listed_input_schemas: dict[str, dict[str, Any]] = {}

    async def list_tools(self) -> list[types.Tool]:
        tools = await super().list_tools()
        return [t.model_copy(update={"input_schema": self.listed_input_schemas[t.name]})
                if t.name in self.listed_input_schemas else t for t in tools]


server = EverythingServer(NAME, version="0.1.0", extensions=[tasks, skills, apps],
                          lifespan=lambda _: tasks.running())


# ---- tools: content -----------------------------------------------------------------------

@server.tool(description="Returns one text block")
def test_simple_text() -> str:
    return "This is a simple text response for testing."


@server.tool(description="Greets name (never a task, whatever the request allows)")
def greet(name: str) -> str:
    return f"Hello, {name}!"


@server.tool(description="Returns one image block (a 1x1 PNG)")
def test_image_content() -> list[types.ImageContent]:
    return [types.ImageContent(type="image", data=PNG_B64, mime_type="image/png")]


@server.tool(description="Returns one audio block (a short WAV)")
def test_audio_content() -> list[types.AudioContent]:
    return [types.AudioContent(type="audio", data=WAV_B64, mime_type="audio/wav")]


def embedded_text(uri: str, mime_type: str, text: str) -> types.EmbeddedResource:
    return types.EmbeddedResource(
        type="resource",
        resource=types.TextResourceContents(uri=uri, mime_type=mime_type, text=text))


@server.tool(description="Returns one embedded text resource")
def test_embedded_resource() -> list[types.EmbeddedResource]:
    return [embedded_text("test://embedded-resource", "text/plain",
                          "This is an embedded resource content.")]


@server.tool(description="Returns text, image and embedded resource blocks together")
def test_multiple_content_types() -> list[types.ContentBlock]:
    return [
        types.TextContent(type="text", text="Multiple content types test:"),
        types.ImageContent(type="image", data=PNG_B64, mime_type="image/png"),
        embedded_text("test://mixed-content-resource", "application/json",
                      json.dumps({"test": "data", "value": 123})),
    ]


@server.tool(description="Always fails: the result has isError true")
def test_error_handling() -> str:
    raise RuntimeError("This tool intentionally returns an error for testing")


# ---- tools: notifications during a call ---------------------------------------------------

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
#: logging/setLevel per legacy session (Mcp-Session-Id; stdio is one session). A session
#: that never set a level gets every level, which the spec allows.
log_thresholds: dict[str, str] = {}


def session_key(request_context: Any) -> str:
    request = getattr(request_context, "request", None)
    headers = getattr(request, "headers", None)
    return (headers.get("mcp-session-id") if headers is not None else None) or "stdio"


async def log(ctx: Context, level: types.LoggingLevel, text: str) -> None:
    threshold = log_thresholds.get(session_key(ctx.request_context), "debug")
    if LOG_LEVELS.index(level) >= LOG_LEVELS.index(threshold):
        await ctx.log(level, text, logger_name=NAME)


@server.tool(description="Sends three info log notifications, 50 ms apart, then answers")
async def test_tool_with_logging(ctx: Context) -> str:
    for i, text in enumerate(("Tool execution started", "Tool processing data",
                              "Tool execution completed")):
        if i:
            await asyncio.sleep(0.05)
        await log(ctx, "info", text)
    return "Tool with logging executed successfully"


@server.tool(description="Logs one message at each of debug, info, warning and error")
async def test_logging_tool(ctx: Context) -> str:
    # 2026-07-28: the SDK sends only what the request's _meta logLevel opted into (nothing
    # without it), which server-stateless checks; 2025-11-25: logging/setLevel filters.
    for level in ("debug", "info", "warning", "error"):
        await log(ctx, level, f"a {level} message from test_logging_tool")
    return "logged at debug, info, warning and error"


@server.tool(description="Reports progress 0, 50 and 100 of 100 (50 ms apart), then answers")
async def test_tool_with_progress(ctx: Context) -> str:
    for i, step in enumerate((0, 50, 100)):
        if i:
            await asyncio.sleep(0.05)
        await ctx.report_progress(step, 100, f"Completed step {step} of 100")
    return "Tool with progress executed successfully"


@server.tool(description="Logs, closes this call's SSE stream, waits for the client to "
                         "reconnect, logs again, then answers (SEP-1699)")
async def test_reconnection(ctx: Context) -> str:
    await log(ctx, "info", "Before disconnect")
    await ctx.close_sse_stream()  # a no-op on stdio
    await asyncio.sleep(0.2)
    await log(ctx, "info", "After reconnect")
    return "Reconnection test completed"


# ---- tools: asking the client during a call, in either era --------------------------------
#
# 2025-11-25: a server->client request on the call's own stream, answered before the tool
# returns. 2026-07-28 has no such back-channel (each request is one exchange; behind a
# gateway, the gateway's host always speaks this era to the fixture): the tool returns an
# InputRequiredResult naming what it needs, the client calls again with the answer in
# inputResponses and the requestState echoed, and the tool finishes then, with the result it
# would have given in the older era.

#: The first revision whose calls ask through InputRequiredResult (SEP-2322).
INPUT_REQUIRED_REVISION = "2026-07-28"


def uses_input_required(ctx: Context) -> bool:
    version = ctx.protocol_version
    return version is not None and is_version_at_least(version, INPUT_REQUIRED_REVISION)


def require_capability(ctx: Context, name: str) -> None:
    """Refuse a call whose client could not answer what the tool asks: -32021 naming the
    capability in the 2026-07-28 era, a tool error (isError) before it."""
    caps = ctx.client_capabilities
    if caps is not None and getattr(caps, name) is not None:
        return
    if uses_input_required(ctx):
        raise MCPError(code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
                       message=f"This tool requires the client's {name} capability",
                       data={"requiredCapabilities": {name: {}}})
    raise RuntimeError(f"the client did not declare the {name} capability")


#: What answers each kind of input request ask_client sends.
ANSWER_TYPES: dict[str, type] = {"elicitation/create": types.ElicitResult,
                                 "sampling/createMessage": types.CreateMessageResult}


async def ask_client(ctx: Context, key: str, request: dict[str, Any]) -> Any:
    """The client's answer to `request` (built by ask or sample), or, in the 2026-07-28 era
    until the retry brings it, the InputRequiredResult the tool must return."""
    method, params = request["method"], request["params"]
    if uses_input_required(ctx):
        state = f"asked:{key}"  # sealed by the SDK; checked so a foreign answer is not taken
        answer = (ctx.input_responses or {}).get(key)
        if isinstance(answer, ANSWER_TYPES[method]) and ctx.request_state == state:
            return answer
        # the first round, or a retry without this answer or this state: ask (again)
        return input_required({key: request}, state)
    # related_request_id puts the request on this call's own stream, which is open now
    # (a standalone GET stream may not be).
    if method == "elicitation/create":
        return await ctx.session.elicit_form(params["message"], params["requestedSchema"],
                                             related_request_id=ctx.request_id)
    return await ctx.session.create_message(
        messages=[types.SamplingMessage.model_validate(m) for m in params["messages"]],
        max_tokens=params["maxTokens"], related_request_id=ctx.request_id)


@server.tool(description="Asks the client to sample an LLM with the prompt")
async def test_sampling(prompt: str, ctx: Context) -> str | types.InputRequiredResult:
    require_capability(ctx, "sampling")
    answer = await ask_client(ctx, "completion", sample(prompt, 100))
    if isinstance(answer, types.InputRequiredResult):
        return answer
    content = answer.content
    return f"LLM response: {content.text if content.type == 'text' else f'<{content.type}>'}"


async def elicit(ctx: Context, prefix: str, message: str,
                 schema: dict[str, Any]) -> str | types.InputRequiredResult:
    """`prefix` and the user's answer to a form, or the InputRequiredResult asking it."""
    require_capability(ctx, "elicitation")
    answer = await ask_client(ctx, "form", ask(message, schema))
    if isinstance(answer, types.InputRequiredResult):
        return answer
    return f"{prefix}: action={answer.action}, content={json.dumps(answer.content or {})}"


@server.tool(description="Asks the user (elicitation) for a username and an email")
async def test_elicitation(message: str, ctx: Context) -> str | types.InputRequiredResult:
    schema = {"type": "object", "required": ["username", "email"], "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"}}}
    return await elicit(ctx, "User response", message, schema)


@server.tool(description="Elicitation whose fields all carry defaults (SEP-1034)")
async def test_elicitation_sep1034_defaults(ctx: Context) -> str | types.InputRequiredResult:
    schema = {"type": "object", "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {"type": "string", "description": "User status",
                   "enum": ["active", "inactive", "pending"], "default": "active"},
        "verified": {"type": "boolean", "description": "Verified", "default": True}}}
    return await elicit(ctx, "Elicitation completed", "Please review your details", schema)


def titled(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"const": value, "title": title} for value, title in pairs]


@server.tool(description="Elicitation with the five enum schema shapes (SEP-1330)")
async def test_elicitation_sep1330_enums(ctx: Context) -> str | types.InputRequiredResult:
    options = ["option1", "option2", "option3"]
    schema = {"type": "object", "properties": {
        "untitledSingle": {"type": "string", "enum": options},
        "titledSingle": {"type": "string", "oneOf": titled(
            ("value1", "First Option"), ("value2", "Second Option"), ("value3", "Third Option"))},
        "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                       "enumNames": ["Option One", "Option Two", "Option Three"]},
        "untitledMulti": {"type": "array", "items": {"type": "string", "enum": options}},
        "titledMulti": {"type": "array", "items": {"anyOf": titled(
            ("value1", "First Choice"), ("value2", "Second Choice"),
            ("value3", "Third Choice"))}}}}
    return await elicit(ctx, "Elicitation completed", "Pick some options", schema)


class Answer(BaseModel):
    answer: str


def question() -> Elicit[Answer]:
    return Elicit("Please answer the question", Answer)


@server.tool(description="Elicits an answer the way the era allows: an elicitation/create "
                         "request during the call (2025-11-25) or InputRequiredResult "
                         "(2026-07-28, never a request on the response stream)")
def test_streaming_elicitation(reply: Annotated[Answer, Resolve(question)]) -> str:
    return f"answered: {reply.answer}"


# ---- tools: 2026-07-28 envelope and listen streams ----------------------------------------

@server.tool(description="Needs the sampling capability declared on the request (-32021 if not)")
async def test_missing_capability(ctx: Context) -> str:
    caps = ctx.client_capabilities
    if caps is None or caps.sampling is None:
        raise MCPError(code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
                       message="This tool requires the client's sampling capability",
                       data={"requiredCapabilities": {"sampling": {}}})
    return "sampling declared"


def passing_tool() -> str:
    """Added and removed again by test_trigger_tool_change."""
    return "passing"


def passing_prompt() -> str:
    """Added and removed again by test_trigger_prompt_change."""
    return "passing"


@server.tool(description="Changes the tool list and announces it on listen streams")
async def test_trigger_tool_change(ctx: Context) -> str:
    server.add_tool(passing_tool, name="test_passing_tool")
    server.remove_tool("test_passing_tool")
    await ctx.notify_tools_changed()
    return "tool list changed"


@server.tool(description="Changes the prompt list and announces it on listen streams")
async def test_trigger_prompt_change(ctx: Context) -> str:
    server.add_prompt(Prompt.from_function(passing_prompt, name="test_passing_prompt",
                                           description="Added and removed again"))
    server.remove_prompt("test_passing_prompt")
    await ctx.notify_prompts_changed()
    return "prompt list changed"


@server.tool(description="Echoes region, which is mirrored in the Mcp-Param-Region header")
def test_mcp_param_header(
    region: Annotated[str, Field(description="also sent as the Mcp-Param-Region header",
                                 json_schema_extra={"x-mcp-header": "Region"})] = "none",
) -> str:
    return f"region={region}"


@server.tool(description="Has an inputSchema with JSON Schema 2020-12 keywords")
def json_schema_2020_12_tool() -> str:
    return "json_schema_2020_12_tool"


server.listed_input_schemas["json_schema_2020_12_tool"] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"$anchor": "addressDef", "type": "object", "properties": {
        "street": {"type": "string"}, "city": {"type": "string"}}}},
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"}},
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


# ---- tools and a prompt: multi round-trip requests (2026-07-28, SEP-2322) -----------------

@server.tool(description="Asks for the user's name (InputRequiredResult), then greets")
async def test_input_required_result_elicitation(ctx: Context) -> str | types.InputRequiredResult:
    name = accepted_field(ctx, "user_name", "name")
    return f"Hello, {name}!" if name is not None else input_required({"user_name": NAME_QUESTION})


@server.tool(description="Asks the client to sample an LLM (InputRequiredResult)")
async def test_input_required_result_sampling(ctx: Context) -> str | types.InputRequiredResult:
    text = sampled_text(ctx, "capital_question")
    if text is not None:
        return f"Model said: {text}"
    return input_required({"capital_question": sample("What is the capital of France?", 100)})


@server.tool(description="Asks the client for its roots (InputRequiredResult)")
async def test_input_required_result_list_roots(ctx: Context) -> str | types.InputRequiredResult:
    roots = listed_roots(ctx, "client_roots")
    if roots is not None:
        return f"Client roots ({len(roots)}): {', '.join(roots) or '(none)'}"
    return input_required({"client_roots": LIST_ROOTS})


CONFIRM_STATE = "awaiting-confirmation"


@server.tool(description="Asks for a confirmation and checks the echoed requestState")
async def test_input_required_result_request_state(
        ctx: Context) -> str | types.InputRequiredResult:
    answered = isinstance((ctx.input_responses or {}).get("confirm"), types.ElicitResult)
    if answered and ctx.request_state == CONFIRM_STATE:
        return "state-ok: confirmation received with the state this server issued"
    return input_required({"confirm": ask("Please confirm", string_form("ok", "boolean"))},
                          CONFIRM_STATE)


@server.tool(description="Asks for a name, a sampled greeting and the roots in one round")
async def test_input_required_result_multiple_inputs(
        ctx: Context) -> str | types.InputRequiredResult:
    name = accepted_field(ctx, "user_name", "name")
    greeting = sampled_text(ctx, "greeting")
    roots = listed_roots(ctx, "client_roots")
    if name is not None and greeting is not None and roots is not None:
        return f"{greeting} {name} ({len(roots)} root(s))"
    return input_required({"user_name": NAME_QUESTION,
                           "greeting": sample("Generate a greeting", 50),
                           "client_roots": LIST_ROOTS}, "multiple-inputs")


@server.tool(description="Three rounds: a name, then a colour (requestState evolves)")
async def test_input_required_result_multi_round(
        ctx: Context) -> str | types.InputRequiredResult:
    state = json.loads(ctx.request_state) if ctx.request_state else {}
    if state.get("round") == 1:
        name = accepted_field(ctx, "step1", "name")
        if name is not None:
            return input_required(
                {"step2": ask("Step 2: What is your favorite color?", string_form("color"))},
                json.dumps({"round": 2, "name": name}))
    elif state.get("round") == 2:
        color = accepted_field(ctx, "step2", "color")
        if color is not None:
            return f"{state.get('name')} likes {color}."
    # first round, or an answer missing or out of order: start again
    return input_required({"step1": ask("Step 1: What is your name?", string_form("name"))},
                          json.dumps({"round": 1}))


@server.tool(description="Issues a sealed requestState; the SDK refuses a tampered echo")
async def test_input_required_result_tampered_state(
        ctx: Context) -> str | types.InputRequiredResult:
    if ctx.request_state is None:
        return input_required({"confirm": ask("Please confirm", string_form("ok", "boolean"))},
                              "round-1")
    return f"state-ok: {ctx.request_state}"


@server.tool(description="Asks only for what the request's clientCapabilities declare")
async def test_input_required_result_capabilities(
        ctx: Context) -> str | types.InputRequiredResult:
    caps = ctx.client_capabilities
    requests: dict[str, dict[str, Any]] = {}
    if caps is not None and caps.sampling is not None:
        requests["sample"] = sample("Say hello", 50)
    if caps is not None and caps.elicitation is not None:
        requests["ask"] = NAME_QUESTION
    if caps is not None and caps.roots is not None:
        requests["roots"] = LIST_ROOTS
    if not requests:
        return "The client declared no capability this tool could ask through."
    if ctx.input_responses and set(requests) <= set(ctx.input_responses):
        return f"Received {', '.join(sorted(requests))}."
    return input_required(requests, "capability-gated")


@server.prompt(description="Asks for context (InputRequiredResult), then builds the prompt")
async def test_input_required_result_prompt(ctx: Context) -> list[dict] | types.InputRequiredResult:
    context = accepted_field(ctx, "user_context", "context")
    if context is None:
        return input_required({"user_context": ask("What context should the prompt use?",
                                                   string_form("context"))})
    return [{"role": "user", "content": {"type": "text",
                                         "text": f"Use the following context: {context}"}}]


# ---- prompts --------------------------------------------------------------------------------

def user(content: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": content}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


@server.prompt(description="A prompt without arguments")
def test_simple_prompt() -> list[dict]:
    return [user(text("This is a simple prompt for testing."))]


@server.prompt(description="A prompt with two required arguments")
def test_prompt_with_arguments(arg1: str, arg2: str) -> list[dict]:
    return [user(text(f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"))]


@server.prompt(description="A prompt embedding the resource named by resourceUri")
def test_prompt_with_embedded_resource(resourceUri: str) -> list[dict]:
    return [user({"type": "resource", "resource": {
                "uri": resourceUri, "mimeType": "text/plain",
                "text": "Embedded resource content for testing."}}),
            user(text("Please process the embedded resource above."))]


@server.prompt(description="A prompt with an image")
def test_prompt_with_image() -> list[dict]:
    return [user({"type": "image", "data": PNG_B64, "mimeType": "image/png"}),
            user(text("Please analyze the image above."))]


# ---- resources --------------------------------------------------------------------------------

@server.resource("test://static-text", name="static-text", mime_type="text/plain",
                 description="A static text resource")
def static_text() -> str:
    return "This is the content of the static text resource."


@server.resource("test://static-binary", name="static-binary", mime_type="image/png",
                 description="A static binary resource (a 1x1 PNG)")
def static_binary() -> bytes:
    return PNG


@server.resource("test://watched-resource", name="watched-resource", mime_type="text/plain",
                 description="A resource clients may subscribe to")
def watched_resource() -> str:
    return "Watched resource content"


@server.resource("test://template/{id}/data", name="template-data",
                 mime_type="application/json", description="Data for one id (a template)")
def template_data(id: str) -> str:
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


# ---- completion ---------------------------------------------------------------------------------

#: What completion/complete suggests, per (reference, argument); filtered by prefix.
SUGGESTIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("test_prompt_with_arguments", "arg1"): ("paris", "park", "party", "hello"),
    ("test_prompt_with_arguments", "arg2"): ("world", "word", "work"),
    ("test://template/{id}/data", "id"): ("1", "2", "3", "123"),
}


@server.completion()
async def complete(ref: types.PromptReference | types.ResourceTemplateReference,
                   argument: types.CompletionArgument,
                   context: types.CompletionContext | None) -> types.Completion:
    target = ref.name if isinstance(ref, types.PromptReference) else str(ref.uri)
    values = [v for v in SUGGESTIONS.get((target, argument.name), ())
              if v.startswith(argument.value)]
    return types.Completion(values=values, total=len(values), has_more=False)


# ---- 2025-11-25-only requests MCPServer has no decorator for ------------------------------------

subscriptions: set[str] = set()


async def set_level(ctx: ServerRequestContext, params: types.SetLevelRequestParams
                    ) -> types.EmptyResult:
    log_thresholds[session_key(ctx)] = params.level
    return types.EmptyResult()


async def subscribe(ctx: ServerRequestContext, params: types.SubscribeRequestParams
                    ) -> types.EmptyResult:
    subscriptions.add(str(params.uri))
    return types.EmptyResult()


async def unsubscribe(ctx: ServerRequestContext, params: types.UnsubscribeRequestParams
                      ) -> types.EmptyResult:
    subscriptions.discard(str(params.uri))
    return types.EmptyResult()


# mcp 2.3.0's MCPServer builds its low-level Server itself and exposes no hook for these
# (deprecated at 2026-07-28, which the SDK then answers -32601 for), so register them there.
for method, params_type, handler in (
        ("logging/setLevel", types.SetLevelRequestParams, set_level),
        ("resources/subscribe", types.SubscribeRequestParams, subscribe),
        ("resources/unsubscribe", types.UnsubscribeRequestParams, unsubscribe)):
    server._lowlevel_server.add_request_handler(method, params_type, handler)


# ---- Streamable HTTP: an SSE event store for resumption (SEP-1699) ------------------------------

class MemoryEventStore(EventStore):
    """Every SSE event the server sent, per stream, so a client that reconnects with
    Last-Event-ID gets what it missed. Bounded per stream: this is a test fixture."""

    PER_STREAM = 1000

    def __init__(self) -> None:
        self.ids = itertools.count(1)
        self.stream_of: dict[str, str] = {}
        self.events: dict[str, deque[tuple[int, types.JSONRPCMessage | None]]] = {}

    async def store_event(self, stream_id: str, message: types.JSONRPCMessage | None) -> str:
        number = next(self.ids)
        events = self.events.setdefault(stream_id, deque(maxlen=self.PER_STREAM))
        events.append((number, message))
        self.stream_of[str(number)] = stream_id
        return str(number)

    async def replay_events_after(self, last_event_id: str,
                                  send_callback: EventCallback) -> str | None:
        stream_id = self.stream_of.get(last_event_id)
        if stream_id is None:
            return None
        after = int(last_event_id)
        for number, message in list(self.events.get(stream_id, ())):
            if number > after and message is not None:  # None: a priming event
                await send_callback(EventMessage(message, str(number)))
        return stream_id


def loopback_port(value: str) -> int:
    host, _, port = value.rpartition(":")
    if host != "127.0.0.1" or not port.isdigit():
        raise argparse.ArgumentTypeError(
            "expected 127.0.0.1:PORT (this fixture binds loopback only)")
    return int(port)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--http", metavar="127.0.0.1:PORT", type=loopback_port,
                      help="Streamable HTTP at http://127.0.0.1:PORT/mcp (0 = a free port)")
    mode.add_argument("--stdio", action="store_true", help="JSON-RPC lines on stdin/stdout")
    args = p.parse_args(argv)
    if args.stdio:
        server.run("stdio")
        return
    # a sibling module (this script's directory is sys.path[0]); HTTP mode only needs it
    from asgi_serve import serve

    app = server.streamable_http_app(event_store=MemoryEventStore(), retry_interval=100)
    serve(app, argparse.Namespace(port=args.http, record=None))


if __name__ == "__main__":
    main(sys.argv[1:])
