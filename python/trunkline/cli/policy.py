"""``trunkline policy check FILE``: an authorization policy compiled as a gateway would
read it, and what in it could never match, before it is put in force (``serve`` reads
it again on SIGHUP, and keeps the old one if the new one does not compile)."""

from __future__ import annotations

import orjson

from ..config import read_host_config
from ..errors import ConfigurationError
from ..policy import Policy, PolicyError


async def check_policy(path: str) -> int:
    """Exit 0 when the policy compiles (its warnings printed), else ``ConfigurationError``
    naming the rule and the error (exit 2)."""
    return _check(path)


def _check(path: str) -> int:
    try:
        with open(path, "rb") as f:
            document = orjson.loads(f.read())
    except OSError as exc:
        raise ConfigurationError(f"{path}: cannot read: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise ConfigurationError(f"{path}: not JSON: {exc}") from None
    servers: list[str] = []
    if isinstance(document, dict) and "mcpServers" in document:
        read = read_host_config(path)
        policy = read.policy
        servers = [s.name for s in read.servers]
        if policy is None:
            raise ConfigurationError(f"{path}: has no \"policy\"")
    else:
        try:
            policy = Policy.load(path)
        except PolicyError as exc:
            raise ConfigurationError(str(exc)) from None
    warnings = policy.warnings(servers)
    for warning in warnings:
        print(f"warning: {warning}")
    print(f"{policy.origin}: {len(policy.rules)} rules, sha256 {policy.digest[:12]}: ok"
          + (f" ({len(warnings)} warnings)" if warnings else ""))
    return 0
