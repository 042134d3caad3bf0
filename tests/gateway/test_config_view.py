"""The configuration as the operator API shows it (``gateway/config_view.py``): every
secret the configuration format can hold is redacted, what is known to be safe is kept,
and a key nobody taught the view is redacted whatever it holds."""

from __future__ import annotations

import orjson

from trunkline.gateway.config_view import REDACTED, redact_args, redact_url, redacted

SECRETS = ["ghp_0123456789abcdefghijABCDEFGHIJ0123", "hunter2-password-value",
           "s3cr3t-header-value", "redis-pass-0042", "query-token-777",
           "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", "sk-live-abcdefABCDEF0123456789",
           "AbCdEf0123456789GhIjKl0123456789", "unknown-key-value-99"]


def config() -> dict:
    return {
        "collision": "prefix",
        "maxUserInstances": 8,
        "pins": {"approveFirstSight": True},
        "oauth": {"store": "redis://user:redis-pass-0042@cache.internal:6379/0",
                  "clientName": "trunkline",
                  "signInClient": {"clientId": "gateway", "clientSecretEnv": "SIGNIN_SECRET"}},
        "policy": {"rules": [{"allow": {"tools": ["*"]}}, {"deny": {"tools": ["x"]}}]},
        "mcpServers": {
            "local": {"command": "/usr/bin/python3",
                      "args": ["-m", "server", "--token", SECRETS[0], "--port", "8080",
                               "--password=hunter2-password-value", "API_KEY=sk-live-"
                               "abcdefABCDEF0123456789", "AbCdEf0123456789GhIjKl0123456789",
                               "https://api.example/v1?token=query-token-777&q=1",
                               "/opt/data/files"],
                      "env": {"GITHUB_TOKEN": SECRETS[0], "LOG_LEVEL": "debug"},
                      "cwd": "/srv/local", "allowLegacy": True, "enabledTools": ["echo"],
                      "callTimeoutMs": 5000},
            "remote": {"url": "https://mcp.example.com/mcp?key=query-token-777",
                       "headers": {"Authorization": "Bearer s3cr3t-header-value"},
                       "oauth": {"clientId": "trunkline", "clientSecretEnv": "REMOTE_SECRET",
                                 "grant": "client_credentials"},
                       "mysteryKey": "unknown-key-value-99"},
            "withjwt": {"url": "https://u:eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln@h.example/"},
        },
        "futureTopLevel": {"anything": "unknown-key-value-99"},
    }


def test_no_secret_survives_and_the_shape_does():
    shown = redacted(config())
    text = orjson.dumps(shown).decode()
    for secret in SECRETS:
        assert secret not in text, secret
    local = shown["mcpServers"]["local"]
    assert local["command"] == "/usr/bin/python3"
    assert local["args"] == ["-m", "server", "--token", REDACTED, "--port", "8080",
                             f"--password={REDACTED}", f"API_KEY={REDACTED}", REDACTED,
                             f"https://api.example/v1?token={REDACTED}&q={REDACTED}",
                             "/opt/data/files"]
    assert local["env"] == {"GITHUB_TOKEN": REDACTED, "LOG_LEVEL": REDACTED}
    assert (local["cwd"], local["allowLegacy"], local["enabledTools"],
            local["callTimeoutMs"]) == ("/srv/local", True, ["echo"], 5000)
    remote = shown["mcpServers"]["remote"]
    assert remote["url"] == f"https://mcp.example.com/mcp?key={REDACTED}"
    assert remote["headers"] == {"Authorization": REDACTED}
    assert remote["oauth"] == {"clientId": "trunkline", "clientSecretEnv": "REMOTE_SECRET",
                               "grant": "client_credentials"}
    assert remote["mysteryKey"] == REDACTED
    assert shown["mcpServers"]["withjwt"]["url"] == f"https://{REDACTED}@h.example/"
    assert shown["oauth"]["store"] == f"redis://{REDACTED}@cache.internal:6379/0"
    assert shown["oauth"]["signInClient"] == {"clientId": "gateway",
                                              "clientSecretEnv": "SIGNIN_SECRET"}
    assert shown["policy"]["rules"] == 2 and "allow" not in orjson.dumps(shown["policy"]
                                                                          ).decode()
    assert shown["futureTopLevel"] == REDACTED
    assert (shown["collision"], shown["maxUserInstances"], shown["pins"]) == \
        ("prefix", 8, {"approveFirstSight": True})


def test_urls_and_arguments_one_by_one():
    assert redact_url("http://127.0.0.1:8080/mcp") == "http://127.0.0.1:8080/mcp"
    assert redact_url("http://[::1]:9/x?a=1") == f"http://[::1]:9/x?a={REDACTED}"
    assert redact_url(42) == REDACTED
    assert redact_args(["--verbose", "--api-key", "plain", "--next"]) == \
        ["--verbose", "--api-key", REDACTED, "--next"]
    assert redact_args(["@modelcontextprotocol/server-everything", "stdio"]) == \
        ["@modelcontextprotocol/server-everything", "stdio"]
    assert redact_args("not a list") == REDACTED
    assert redact_args([{"nested": "x"}]) == [REDACTED]


def test_a_url_inside_an_argument_is_not_shown():
    assert redact_args(["x:https://user:pass@host/"]) == [REDACTED]
