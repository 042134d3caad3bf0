"""Per-user instances of a stdio server through the host, against a real one:
server-everything (the TypeScript SDK 1.x's, legacy era), whose ``get-env`` tool answers
with its own process's environment. Each identity's call goes to a process of its own,
started with that identity's secret (an in-memory ``UserSecrets``), within the server's
and the host's bounds; idle ones are reaped, and nothing is left after close. The live
count is observed twice: the host's (``ServerStatus.instances``) and the processes
themselves (/proc, by a marker each test puts in its secrets)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence
from typing import Any

import orjson
import pytest

import realpeers
from conftest import run
from gateways import real_server
from procs import marked_processes
from trunkline import (
    ConfigurationError,
    Host,
    HostSettings,
    Identity,
    InstanceLimitReached,
    ServerConfig,
    UserSecretMissing,
)
from trunkline.config import read_host_config
from trunkline.params import http, stdio
from trunkline.parent.tasks import ToolTask

pytestmark = pytest.mark.real_servers

VARIABLE = "EVERYTHING_TOKEN"


class MemorySecrets:
    """``UserSecrets`` over a dict: subject -> {variable: value}; what was asked, kept."""

    def __init__(self, values: dict[str, dict[str, str]]) -> None:
        self.values = values
        self.asked: list[tuple[str, tuple[str, str | None, str], tuple[str, ...]]] = []

    async def secrets_for(self, server: str, identity: Identity,
                          names: Sequence[str]) -> dict[str, str]:
        self.asked.append((server, identity.key, tuple(names)))
        own = self.values.get(identity.subject, {})
        return {name: own[name] for name in names if name in own}


def everything(**fields: Any) -> ServerConfig:
    server = realpeers.require(realpeers.LEGACY_TS_EVERYTHING)
    fields.setdefault("secret_env", (VARIABLE,))
    return ServerConfig("ev", real_server(server), allow_legacy=True, instances="per_user",
                        **fields)


def processes_with(marker: str) -> dict[int, str]:
    """Live processes whose environment holds ``marker`` in ``VARIABLE``: pid -> value."""
    return marked_processes(VARIABLE, marker)


async def until(predicate: Any, what: str, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.02)


def env_of(result: Any) -> dict[str, str]:
    """``get-env``'s answer: the server process's environment."""
    value: dict[str, str] = orjson.loads(result.content[0]["text"])
    return value


def instances(host: Host) -> int:
    count = host.servers()[0].instances
    assert count is not None
    return count


IDENTITIES = 200
CALLERS = 8


def test_200_identities_each_its_own_process_within_the_bounds_then_reaped(no_leaks):
    """200 identities call through 8 callers; the server allows 6 instances, the host 5:
    every answer is the caller's own process's (its own secret, nobody else's), the live
    count (the host's and the processes') never passes 5, a call refused at the bound is
    made again, idle instances are reaped, and close leaves nothing."""
    marker = secrets.token_hex(6)
    token = {f"user-{n}": f"{marker}-{n}-{secrets.token_hex(8)}" for n in range(IDENTITIES)}
    store = MemorySecrets({who: {VARIABLE: value} for who, value in token.items()})
    observed = {"host": 0, "processes": 0, "refused": 0}

    async def main() -> None:
        host = Host(user_secrets=store, settings=HostSettings(max_user_instances=5))
        async with host:
            await host.add_servers([everything(max_instances=6, instance_idle_s=0.5)])
            # The catalog instance lists the tools with the configured env only.
            assert processes_with(marker) == {}
            assert "get-env" in [t.name for t in host.tools()]
            pending = list(token)
            answers: dict[str, dict[str, str]] = {}

            async def caller() -> None:
                while pending:
                    who = pending.pop()
                    while True:
                        try:
                            result = await host.call_tool("get-env", {},
                                                          identity=Identity.user(who))
                            break
                        except InstanceLimitReached as exc:
                            assert exc.retry_after_s == 1 and exc.scope == "host"
                            observed["refused"] += 1
                            await asyncio.sleep(0.05)  # then made again
                    answers[who] = env_of(result)

            async def watch() -> None:
                while True:
                    observed["host"] = max(observed["host"], instances(host),
                                           host.user_instances)
                    observed["processes"] = max(observed["processes"],
                                                len(processes_with(marker)))
                    await asyncio.sleep(0.01)

            watcher = asyncio.ensure_future(watch())
            try:
                await asyncio.gather(*(caller() for _ in range(CALLERS)))
            finally:
                watcher.cancel()
            assert len(answers) == IDENTITIES
            for who, env in answers.items():
                assert env[VARIABLE] == token[who]
                others = [v for v in env.values() if marker in v and v != token[who]]
                assert others == [], who
            # Asked once per start, for the server's variables only.
            assert len(store.asked) >= IDENTITIES
            assert ("ev", Identity.user("user-0").key, (VARIABLE,)) in store.asked
            # Idle for 0.5 s: every instance is reaped, processes and all.
            await until(lambda: instances(host) == 0 and not processes_with(marker),
                        "the idle instances reaped")
            assert host.user_instances == 0
        assert processes_with(marker) == {}

    run(main(), timeout=600)
    assert 0 < observed["host"] <= 5, observed
    assert 0 < observed["processes"] <= 5, observed


def test_at_the_bound_the_least_recently_used_idle_instance_makes_room(no_leaks):
    """Two places: alice and bob start theirs, alice calls again, carol's first call stops
    bob's (the least recently used idle one), never alice's."""
    marker = secrets.token_hex(6)
    store = MemorySecrets({who: {VARIABLE: f"{marker}-{who}"} for who in
                           ("alice", "bob", "carol")})

    async def main() -> None:
        async with Host(user_secrets=store) as host:
            await host.add_servers([everything(max_instances=2)])
            for who in ("alice", "bob", "alice"):
                await host.call_tool("get-env", {}, identity=Identity.user(who))
            running = processes_with(marker)
            assert sorted(running.values()) == [f"{marker}-alice", f"{marker}-bob"]
            alice = next(pid for pid, v in running.items() if v.endswith("alice"))
            result = await host.call_tool("get-env", {}, identity=Identity.user("carol"))
            assert env_of(result)[VARIABLE] == f"{marker}-carol"
            running = processes_with(marker)
            assert sorted(running.values()) == [f"{marker}-alice", f"{marker}-carol"]
            assert alice in running  # the same process: kept
            assert instances(host) == 2

    run(main())


def test_with_every_instance_busy_a_call_is_refused_at_once(no_leaks):
    """Both places hold a call in flight (each has sent its first progress): a third
    identity's call fails at once with InstanceLimitReached, starting nothing; once one of
    them has ended, the same call goes through in the room it leaves."""
    marker = secrets.token_hex(6)
    store = MemorySecrets({who: {VARIABLE: f"{marker}-{who}"} for who in
                           ("alice", "bob", "carol")})

    async def main() -> None:
        async with Host(user_secrets=store) as host:
            await host.add_servers([everything(max_instances=2)])
            progressed = {"alice": asyncio.Event(), "bob": asyncio.Event()}
            long_calls = [asyncio.ensure_future(host.call_tool(
                "trigger-long-running-operation", {"duration": 4, "steps": 4},
                identity=Identity.user(who), timeout=60,
                on_progress=lambda *_args, e=event: e.set()))
                for who, event in progressed.items()]
            for event in progressed.values():
                await asyncio.wait_for(event.wait(), 30)
            with pytest.raises(InstanceLimitReached) as refused:
                await host.call_tool("get-env", {}, identity=Identity.user("carol"))
            assert refused.value.scope == "server" and refused.value.limit == 2
            assert refused.value.retry_after_s == 1 and refused.value.sent is False
            assert "maxInstances" in str(refused.value)
            assert sorted(processes_with(marker).values()) == [f"{marker}-alice",
                                                               f"{marker}-bob"]
            await asyncio.gather(*long_calls)
            result = await host.call_tool("get-env", {}, identity=Identity.user("carol"))
            assert env_of(result)[VARIABLE] == f"{marker}-carol"
            assert instances(host) == 2 and len(processes_with(marker)) == 2

    run(main())


def test_calls_without_an_identity_go_to_the_shared_instance(no_leaks):
    """No identity, or ``local``: the catalog instance serves the call, with the
    configured env only; no per-user instance starts and no secret is asked for."""
    store = MemorySecrets({})

    async def main() -> None:
        async with Host(user_secrets=store) as host:
            await host.add_servers([everything()])
            for identity in (None, Identity("local", "local")):
                env = env_of(await host.call_tool("get-env", {}, identity=identity))
                assert VARIABLE not in env
            assert instances(host) == 0 and store.asked == []

    run(main())


def test_a_raw_request_with_an_identity_goes_to_its_instance(no_leaks):
    marker = secrets.token_hex(6)
    store = MemorySecrets({"alice": {VARIABLE: f"{marker}-alice"}})

    async def main() -> None:
        async with Host(user_secrets=store) as host:
            await host.add_servers([everything()])
            listed = await host.request("ev", "prompts/list", identity=Identity.user("alice"))
            assert listed["prompts"]
            assert list(processes_with(marker).values()) == [f"{marker}-alice"]
            assert instances(host) == 1

    run(main())


def test_a_missing_secret_fails_the_call_and_starts_nothing(no_leaks):
    marker = secrets.token_hex(6)
    store = MemorySecrets({"alice": {VARIABLE: f"{marker}-alice"}})

    async def main() -> None:
        async with Host(user_secrets=store) as host:
            await host.add_servers([everything()])
            with pytest.raises(UserSecretMissing) as missing:
                await host.call_tool("get-env", {}, identity=Identity.user("bob"))
            assert missing.value.missing == (VARIABLE,)
            assert VARIABLE in str(missing.value) and marker not in str(missing.value)
            assert instances(host) == 0 and processes_with(marker) == {}
            # The place it took is free again: alice's call starts hers.
            await host.call_tool("get-env", {}, identity=Identity.user("alice"))
            assert instances(host) == 1

    run(main())


def test_status_counts_instances_never_secrets(no_leaks):
    marker = secrets.token_hex(6)
    store = MemorySecrets({"alice": {VARIABLE: f"{marker}-alice"}})

    async def main() -> None:
        async with Host(user_secrets=store) as host:
            await host.add_servers([everything()])
            await host.call_tool("get-env", {}, identity=Identity.user("alice"))
            status = host.servers()[0]
            assert status.instances == 1 and host.user_instances == 1
            assert marker not in repr(status)

    run(main())


def test_a_host_without_user_secrets_refuses_secret_env():
    async def main() -> None:
        async with Host() as host:
            with pytest.raises(ConfigurationError, match="secret_env needs per-user secrets"):
                await host.add_servers([everything()])
            assert host.servers() == []

    run(main())


@pytest.mark.parametrize(("entry", "error"), [
    ({"url": "http://127.0.0.1:1/mcp", "instances": "per_user"},
     "are for stdio servers only"),
    ({"command": "x", "instances": "each"}, "\"instances\" must be one of"),
    ({"command": "x", "secretEnv": ["TOKEN"]}, "secret_env needs per-user instances"),
    ({"command": "x", "instances": "per_user", "secretEnv": ["1TOKEN"]},
     "'1TOKEN' is not an environment variable's name"),
    ({"command": "x", "instances": "per_user", "secretEnv": ["A=B"]},
     "is not an environment variable's name"),
    ({"command": "x", "instances": "per_user", "secretEnv": "TOKEN"},
     "\"secretEnv\" must be a list"),
    ({"command": "x", "instances": "per_user", "secretEnv": ["TOKEN", "TOKEN"]},
     "names a variable twice"),
    ({"command": "x", "env": {"TOKEN": "operator-value-123"}, "instances": "per_user",
      "secretEnv": ["TOKEN"]}, "'TOKEN' is also set in env"),
    ({"command": "x", "instances": "per_user", "maxInstances": 0},
     "\"maxInstances\" must be a positive integer"),
    ({"command": "x", "instances": "per_user", "instanceIdleS": -1},
     "\"instanceIdleS\" must be a positive number"),
])
def test_the_configuration_is_checked(entry, error):
    with pytest.raises(ConfigurationError, match=error) as refused:
        read_host_config({"mcpServers": {"s": entry}})
    assert "operator-value-123" not in str(refused.value)


def test_the_configuration_reads_every_key():
    read = read_host_config({"maxUserInstances": 9, "mcpServers": {"s": {
        "command": "x", "instances": "per_user", "secretEnv": ["GITHUB_TOKEN"],
        "maxInstances": 3, "instanceIdleS": 1.5}}})
    config = read.servers[0]
    assert (config.instances, config.secret_env, config.max_instances,
            config.instance_idle_s) == ("per_user", ("GITHUB_TOKEN",), 3, 1.5)
    assert read.max_user_instances == 9
    assert Host.from_config({"maxUserInstances": 9, "mcpServers": {}}
                            ).settings.max_user_instances == 9
    default = read_host_config({"mcpServers": {"s": {"command": "x"}}}).servers[0]
    assert (default.instances, default.secret_env, default.max_instances,
            default.instance_idle_s) == ("shared", (), 64, 300.0)
    with pytest.raises(ConfigurationError, match="maxUserInstances"):
        read_host_config({"maxUserInstances": 0, "mcpServers": {}})
    with pytest.raises(ConfigurationError, match="per-user instances are for stdio"):
        ServerConfig("h", http("http://127.0.0.1:1/mcp"), instances="per_user")
    ServerConfig("s", stdio("x"), instances="per_user", secret_env=("A_1",))


def test_a_place_handed_across_servers_is_counted_once(no_leaks):
    """Two per-user servers, two places in all: a third identity's call stops the least
    recently used idle instance, of either server; the counts per server always add up to
    the processes running, and every place is free again once all are reaped."""
    marker = secrets.token_hex(6)
    store = MemorySecrets({who: {VARIABLE: f"{marker}-{who}"} for who in
                           ("alice", "bob", "carol", "dave")})
    first = everything(instance_idle_s=30)
    second = ServerConfig("ev2", first.params, allow_legacy=True, instances="per_user",
                          secret_env=(VARIABLE,), instance_idle_s=0.5)

    async def main() -> None:
        host = Host(user_secrets=store, settings=HostSettings(max_user_instances=2))
        async with host:
            await host.add_servers([first, second])
            names = {t.name for t in host.tools()}
            tool = {server: next(n for n in names if n.startswith(f"{server}_get-env"))
                    for server in ("ev", "ev2")}

            def counts() -> dict[str, int | None]:
                return {s.name: s.instances for s in host.servers()}

            async def call(who: str, server: str) -> None:
                await host.call_tool(tool[server], {}, identity=Identity.user(who))
                await until(lambda: len(processes_with(marker)) == sum(
                    c or 0 for c in counts().values()), "the counts and processes agree")
                assert host.user_instances == sum(c or 0 for c in counts().values()) <= 2

            await call("alice", "ev")
            await call("bob", "ev2")
            await call("alice", "ev")  # bob's is the least recently used now
            await call("carol", "ev")  # bob's place goes to ev
            assert counts() == {"ev": 2, "ev2": 0}
            await call("dave", "ev2")  # alice's (ev) goes to ev2
            assert counts() == {"ev": 1, "ev2": 1}
            assert sorted(processes_with(marker).values()) == [f"{marker}-carol",
                                                               f"{marker}-dave"]
            await until(lambda: counts() == {"ev": 1, "ev2": 0}, "ev2's idle instance reaped")
            assert host.user_instances == 1

    run(main())


def test_an_instance_following_a_task_is_not_idle(no_leaks):
    """A task alice's call started on her instance (server-everything's research query,
    about 4 s) is followed to its end although her instance has had no call in flight for
    far longer than its idle time (0.5 s): it is reaped only once the task has ended."""
    marker = secrets.token_hex(6)
    store = MemorySecrets({"alice": {VARIABLE: f"{marker}-alice"}})

    async def main() -> None:
        async with Host(user_secrets=store) as host:
            await host.add_servers([everything(instance_idle_s=0.5)])
            task = await host.start_tool("simulate-research-query", {"topic": "instances"},
                                         identity=Identity.user("alice"))
            assert isinstance(task, ToolTask), task
            result = await task.wait()
            assert "Research Report" in result.text
            assert instances(host) == 1
            await until(lambda: instances(host) == 0, "the instance reaped after its task")

    run(main())
