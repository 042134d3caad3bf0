"""The fleet's prompts, resources, templates and completions through ``trunkline serve``:
merged lists (prompts named by the tools' collision rule), each request routed to the
server that owns the name or URI, one failing server never emptying a list. Real servers
behind it: two npm ``server-everything`` (TS SDK 1.x, legacy, allowlisted) and our mcp 2.x
peer (modern), which offer different prompts and resources."""

from __future__ import annotations

import json

import pytest

import realpeers
from conftest import run, scripted
from gateways import HttpGateway, fleet_config, real_server
from mcp_schema import LEGACY, MODERN, conforms

pytestmark = pytest.mark.real_servers


def fleet(tmp_path, *, with_failing: bool = False):
    servers = {"ev": real_server(realpeers.LEGACY_TS_EVERYTHING),
               "py": real_server(realpeers.MODERN_PY_ECHO),
               "ev2": real_server(realpeers.LEGACY_TS_EVERYTHING)}
    if with_failing:
        # Declares prompts and resources, then answers every list with an error.
        servers["bad"] = scripted("--capabilities", json.dumps({"tools": {}, "prompts": {},
                                                                 "resources": {}}))
    return fleet_config(tmp_path, servers, allow_legacy=("ev", "ev2"))


def names(result, member, key="name"):
    return [item[key] for item in result[member]]


def test_lists_are_merged_with_the_tools_naming_rule(gateways, tmp_path):
    path = fleet(tmp_path, with_failing=True)
    async def main():
        gw = await HttpGateway.start(path, gateways)
        status, prompts = await gw.modern("prompts/list")
        assert status == 200, prompts
        conforms(prompts["result"], MODERN, "ListPromptsResult")
        served = names(prompts["result"], "prompts")
        # ev keeps its names, py's own prompt is plain, ev2's collide and are prefixed.
        assert "simple-prompt" in served and "greet" in served
        assert "ev2/simple-prompt" in served and "py/greet" not in served
        assert len(served) == len(set(served))
        _, resources = await gw.modern("resources/list")
        conforms(resources["result"], MODERN, "ListResourcesResult")
        uris = names(resources["result"], "resources", "uri")
        assert "echo://about" in uris
        assert len(uris) == len(set(uris)), "a URI both ev servers list is served once"
        _, templates = await gw.modern("resources/templates/list")
        conforms(templates["result"], MODERN, "ListResourceTemplatesResult")
        assert {"echo://items/{item}", "demo://resource/dynamic/text/{resourceId}"} <= set(
            names(templates["result"], "resourceTemplates", "uriTemplate"))
        assert await gw.stop() == 0
        assert b"'bad': prompts/list failed, left out" in gw.stderr
    run(main(), timeout=180)


def test_requests_go_to_the_server_that_owns_the_name_or_uri(gateways, tmp_path):
    path = fleet(tmp_path)
    async def main():
        gw = await HttpGateway.start(path, gateways)
        # Not listed first: the gateway lists on demand (another replica may have).
        _, greeted = await gw.modern("prompts/get", {"name": "greet",
                                                     "arguments": {"name": "Ada"}})
        conforms(greeted["result"], MODERN, "GetPromptResult")
        assert greeted["result"]["messages"][0]["content"]["text"] == "Please greet Ada warmly."
        _, prefixed = await gw.modern("prompts/get", {"name": "ev2/args-prompt",
                                                      "arguments": {"city": "Oslo"}})
        assert "Oslo" in prefixed["result"]["messages"][0]["content"]["text"]
        _, about = await gw.modern("resources/read", {"uri": "echo://about"})
        conforms(about["result"], MODERN, "ReadResourceResult")
        assert about["result"]["contents"][0]["text"] == "trunkline modern echo peer"
        # A URI nobody listed goes to the server whose template matches it.
        _, item = await gw.modern("resources/read", {"uri": "echo://items/pear"})
        assert item["result"]["contents"][0]["text"] == "item pear"
        _, dynamic = await gw.modern("resources/read",
                                     {"uri": "demo://resource/dynamic/text/7"})
        assert dynamic["result"]["contents"][0]["uri"] == "demo://resource/dynamic/text/7"
        # Completions follow the prompt's or the template's owner.
        _, completed = await gw.modern("completion/complete", {
            "ref": {"type": "ref/resource", "uri": "echo://items/{item}"},
            "argument": {"name": "item", "value": "ap"}})
        conforms(completed["result"], MODERN, "CompleteResult")
        assert completed["result"]["completion"]["values"] == ["apple", "apricot"]
        _, department = await gw.modern("completion/complete", {
            "ref": {"type": "ref/prompt", "name": "ev2/completable-prompt"},
            "argument": {"name": "department", "value": "E"}})
        assert department["result"]["completion"]["values"] == ["Engineering"]
        # What nobody owns is not found, in the 2026-07-28 way.
        _status, missing = await gw.modern("resources/read", {"uri": "nowhere://x"})
        assert missing["error"]["code"] == -32602
        assert missing["error"]["data"] == {"uri": "nowhere://x"}
        conforms(missing, MODERN, "JSONRPCErrorResponse")
        _, no_prompt = await gw.modern("prompts/get", {"name": "py/greet"})
        assert no_prompt["error"]["code"] == -32602 and "py/greet" in no_prompt["error"]["message"]
        assert await gw.stop() == 0
    run(main(), timeout=180)


def test_a_legacy_client_gets_the_same_in_its_era(gateways, tmp_path):
    path = fleet(tmp_path)
    async def main():
        gw = await HttpGateway.start(path, gateways)
        session, answer = await gw.legacy_session()
        assert {"prompts", "resources", "completions"} <= set(answer["result"]["capabilities"])
        _, prompts, _ = await gw.post(gw.message("prompts/list", {}), session)
        conforms(prompts["result"], LEGACY, "ListPromptsResult")
        assert "resultType" not in prompts["result"]
        _, greeted, _ = await gw.post(gw.message("prompts/get", {
            "name": "greet", "arguments": {"name": "Lin"}}), session)
        conforms(greeted["result"], LEGACY, "GetPromptResult")
        assert "resultType" not in greeted["result"]
        _, missing, _ = await gw.post(gw.message("resources/read", {"uri": "nowhere://x"}),
                                      session)
        assert missing["error"]["code"] == -32002, "2025-11-25's resource-not-found"
        assert await gw.stop() == 0
    run(main(), timeout=180)
