"""The operator API's OpenAPI 3.1 description (``GET /admin/api/openapi.json``). Pure.

Rules:

- Every route of ``operator_api.ROUTES`` is described, and nothing else; each response
  with a JSON body names its schema (JSON Schema 2020-12, under ``components``), which
  the documents the API answers with satisfy (the tests check both).
- Schemas allow fields they do not name (``additionalProperties`` is left open): fields
  are only ever added within one ``SCHEMA``, and a reader ignores those it does not know.
- Security: an admin key or an access token with the admin scope (``bearer``), or a
  browser session (``session``, whose state changes also need ``X-CSRF-Token``).
"""

from __future__ import annotations

from typing import Any

from .operator_documents import SCHEMA


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(kind: str) -> dict[str, Any]:
    return {"type": [kind, "null"]}


def _strings() -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}}


def _object(properties: dict[str, Any], required: list[str] | None = None
            ) -> dict[str, Any]:
    return {"type": "object", "properties": properties,
            "required": list(properties) if required is None else required}


_SCHEMAS: dict[str, Any] = {
    "Error": _object({"error": {"type": "string"}}),
    "Server": _object({
        "name": {"type": "string"},
        "state": {"type": "string", "enum": ["starting", "negotiating", "ready",
                                             "restarting", "unavailable", "stopped"]},
        "era": _nullable("string"), "version": _nullable("string"),
        "reason": _nullable("string"), "hint": _nullable("string"),
        "evidence": _strings(),
        "restarts": {"type": "integer", "minimum": 0},
        "in_flight": {"type": "integer", "minimum": 0},
        "answered": {"type": "integer", "minimum": 0},
        "p50_ms": _nullable("number"), "p99_ms": _nullable("number"),
        "last_error": _nullable("string"), "last_error_at": _nullable("number"),
        "listing_error": _nullable("string"),
        "tools": {"type": "integer", "minimum": 0}}),
    "ReloadOutcome": _object({
        "ok": {"type": "boolean"}, "error": _nullable("string"),
        "added": _strings(), "removed": _strings(), "replaced": _strings(),
        "unchanged": _strings(), "policy_changed": {"type": "boolean"},
        "started_at": {"type": "number"}, "finished_at": {"type": "number"},
        "deferred": {"type": "boolean", "description": "checked here and passed to every "
                     "copy of serve --processes N, which each reload by themselves"}},
        ["ok", "error"]),
    "Servers": _object({
        "schema": {"const": SCHEMA},
        "servers": {"type": "array", "items": _ref("Server")},
        "tools": {"type": "integer", "minimum": 0},
        "reload": _object({"in_progress": {"type": "boolean"},
                           "last": {"oneOf": [_ref("ReloadOutcome"), {"type": "null"}]}})}),
    "Copies": _object({"told": {"type": "integer", "minimum": 0},
                       "failed": {"type": "array", "items": {"type": "integer"}}}),
    "ServerChanged": _object({"server": _ref("Server"), "copies": _ref("Copies")}),
    "Quarantined": _object({
        "server": {"type": "string"}, "tool": {"type": "string"},
        "reason": {"type": "string", "enum": ["changed", "renamed", "new", "bound"]},
        "changes": _strings(), "renamed_from": _nullable("string"),
        "bound": _nullable("string"), "approvable": {"type": "boolean"},
        "detail": {"type": "string"},
        "approved": _nullable("object"), "current": _nullable("object")}),
    "Quarantine": _object({
        "schema": {"const": SCHEMA},
        "quarantined": {"type": "array", "items": _ref("Quarantined")}}),
    "Approved": _object({
        "approved": _object({"server": {"type": "string"}, "tool": {"type": "string"},
                             "definition": _nullable("object")}),
        "quarantined": {"type": "array", "items": _ref("Quarantined")},
        "copies": _ref("Copies")}),
    "Session": _object({
        "operator": _nullable("string"),
        "via": {"type": "string", "enum": ["session", "bearer"]},
        "csrf": _nullable("string"), "expires_at": _nullable("number")}),
    "Config": _object({
        "schema": {"const": SCHEMA}, "path": {"type": "string"},
        "config": {"type": "object"}, "redacted": {"type": "string"}}),
    "Credential": _object({
        "user": {"type": "string", "description": "KIND:SUBJECT@ISSUER, or (shared) for "
                 "the gateway's own token"},
        "server": {"type": "string"}, "issuer": {"type": "string"},
        "record": {"type": "string", "description": "token, client (registered, no "
                   "token), or secret and the names of its variables (never a value)"},
        "expires": {"type": "string"}, "refresh_token": {"type": "boolean"}}),
    "Credentials": _object({
        "schema": {"const": SCHEMA},
        "credentials": {"type": "array", "items": _ref("Credential")},
        "sealed": {"type": "boolean", "description": "whether the per-user records could "
                   "be read (the store's key is set)"}}),
    "RevokeRequest": {**_object({
        "user": {"type": "string", "description": "KIND:SUBJECT@ISSUER"},
        "server": {**_nullable("string"), "description": "one server only"}}, ["user"]),
        "additionalProperties": False},
    "Revoked": _object({
        "schema": {"const": SCHEMA}, "user": {"type": "string"},
        "server": _nullable("string"),
        "revoked": {"type": "array", "items": _object({
            "server": {"type": "string"},
            "outcome": {"type": "string", "description": "what the issuer did (RFC 7009), "
                        "as a sentence"}})},
        "deleted": _object({"tokens": {"type": "integer", "minimum": 0},
                            "secrets": {"type": "integer", "minimum": 0}}),
        "copies": _ref("Copies")}),
    "OpenApi": _object({"openapi": {"type": "string"}, "info": {"type": "object"},
                        "paths": {"type": "object"}}, ["openapi", "info", "paths"]),
}


def _json(description: str, schema: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": _ref(schema)}}}


def _errors(*statuses: int) -> dict[str, Any]:
    said = {400: "Bad request", 401: "Without the admin credential",
            403: "A browser session's change without its CSRF token",
            404: "No such server, or nothing waits for approval",
            409: "The change cannot be made now (the reason says why)",
            413: "The body is too large", 415: "Not a form",
            422: "The configuration was refused (the old one keeps serving), or applied "
                 "in part (the error says what failed)",
            429: "Too many failed logins from this address",
            503: "The token issuer's keys cannot be fetched, too many streams, or the "
                 "token store cannot be read now"}
    return {str(s): _json(said[s], "Error") for s in statuses}


def _operation(operation_id: str, summary: str, responses: dict[str, Any], *,
               params: tuple[str, ...] = (), changes_state: bool = False) -> dict[str, Any]:
    op: dict[str, Any] = {"operationId": operation_id, "summary": summary,
                          "responses": {**responses, **_errors(401)}}
    if params:
        op["parameters"] = [{"name": name, "in": "path", "required": True,
                             "schema": {"type": "string"}} for name in params]
    if changes_state:
        op["parameters"] = [*op.get("parameters", []), {
            "name": "X-CSRF-Token", "in": "header", "required": False,
            "description": "the session's CSRF token (GET /admin/api/session); required "
                           "when authenticated by the session cookie",
            "schema": {"type": "string"}}]
        op["responses"].update(_errors(403))
    return op


def openapi_document(version: str) -> dict[str, Any]:
    """The document, for the gateway of this ``version``."""
    see_other = {"description": "To /admin", "headers": {"Location": {
        "schema": {"type": "string"}}}}
    paths: dict[str, Any] = {
        "/admin/login": {"post": {
            "operationId": "login", "summary": "Open a browser session with an admin key",
            "security": [],
            "requestBody": {"required": True, "content": {
                "application/x-www-form-urlencoded": {"schema": _object(
                    {"key": {"type": "string"}})}}},
            "responses": {"303": {**see_other, "description": "Logged in (Set-Cookie), or "
                                  "a browser's refusal (to /admin?login=refused)"},
                          **_errors(401, 415, 429)}}},
        "/admin/logout": {"post": _operation(
            "logout", "End the browser session", {"303": see_other}, changes_state=True)},
        "/admin/api/openapi.json": {"get": _operation(
            "openapi", "This document", {"200": _json("The OpenAPI document", "OpenApi")})},
        "/admin/api/session": {"get": _operation(
            "session", "Who asks, and the session's CSRF token",
            {"200": _json("The session", "Session")})},
        "/admin/api/servers": {"get": _operation(
            "servers", "Every server's state, era, counters and latencies",
            {"200": _json("The fleet", "Servers")})},
        "/admin/api/servers/{name}": {"get": _operation(
            "server", "One server", {"200": _json("The server", "Server"),
                                     **_errors(404)}, params=("name",))},
        "/admin/api/servers/{name}/restart": {"post": _operation(
            "restartServer", "Stop the server's worker and start it again (the era is "
            "negotiated afresh); every copy of serve --processes N does it",
            {"200": _json("Restarted", "ServerChanged"), **_errors(404, 409, 413)},
            params=("name",), changes_state=True)},
        "/admin/api/servers/{name}/retry": {"post": _operation(
            "retryServer", "Try an unavailable server again (fresh restart budget), or "
            "list a ready one again", {"200": _json("Tried", "ServerChanged"),
                                       **_errors(404, 409, 413)},
            params=("name",), changes_state=True)},
        "/admin/api/quarantine": {"get": _operation(
            "quarantine", "The quarantined tools, with their definitions and what changed",
            {"200": _json("The quarantined tools", "Quarantine")})},
        "/admin/api/quarantine/{server}/{tool}/approve": {"post": _operation(
            "approveTool", "Approve a quarantined tool's definition: it becomes its pin, "
            "and the tool is listed to clients",
            {"200": _json("Approved", "Approved"), **_errors(404, 409, 413)},
            params=("server", "tool"), changes_state=True)},
        "/admin/api/reload": {"post": _operation(
            "reload", "Read the configuration again and change the fleet by difference",
            {"200": _json("Reloaded", "ReloadOutcome"), **_errors(413, 422)},
            changes_state=True)},
        "/admin/api/credentials": {"get": {**_operation(
            "credentials", "The per-user records of the gateway's token store (and its own "
            "tokens): user, server, issuer, kind, expiry; never a value",
            {"200": _json("The records", "Credentials"), **_errors(400, 404, 409, 503)}),
            "parameters": [
                {"name": "user", "in": "query", "required": False,
                 "description": "one user's records only (KIND:SUBJECT@ISSUER)",
                 "schema": {"type": "string"}},
                {"name": "server", "in": "query", "required": False,
                 "description": "one server's records only", "schema": {"type": "string"}}]}},
        "/admin/api/credentials/revoke": {"post": {**_operation(
            "revokeCredentials", "Revoke a user's tokens at their issuers (RFC 7009, where "
            "advertised), delete its records, and drop what the running gateway holds for "
            "it (every copy of serve --processes N): its next call is offered sign-in",
            {"200": _json("Revoked", "Revoked"), **_errors(400, 404, 409, 413, 503)},
            changes_state=True),
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": _ref("RevokeRequest")}}}}},
        "/admin/api/config": {"get": _operation(
            "config", "The configuration file as it reads now, every secret redacted",
            {"200": _json("The configuration", "Config"), **_errors(503)})},
        "/admin/api/events": {"get": _operation(
            "events", "Server-sent events: servers, quarantine (each document when it "
            "changes), reload (each outcome)",
            {"200": {"description": "An event stream", "content": {
                "text/event-stream": {"schema": {"type": "string"}}}}, **_errors(503)})},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "trunkline operator API", "version": version,
                 "description": "The gateway's fleet, quarantined tools, reload, "
                                "configuration and users' credentials, behind the admin "
                                "credential."},
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}, {"session": []}],
        "paths": paths,
        "components": {
            "schemas": _SCHEMAS,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "An admin key, or an OAuth access token of the "
                                          "gateway's issuers with the admin scope"},
                "session": {"type": "apiKey", "in": "cookie", "name": "trunkline_admin",
                            "description": "A browser session (POST /admin/login)"}}},
    }


__all__ = ["openapi_document"]
