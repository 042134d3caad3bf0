"""A real nginx (Debian's ``nginx`` package, installed by ``.ci/install-system``) in front
of ``trunkline serve --http`` replicas, configured as the recipe of
docs/how-to/load-balancer.md says: a legacy session's requests go to the replica whose name
leads its ``Mcp-Session-Id`` (``--replica NAME``, an ``upstream`` of that name here),
everything else round-robin, the response streamed as it comes (``proxy_buffering off``),
and only a failed connect retried on another replica (nginx never sends a POST twice
unless told to).

nginx runs in the foreground (``daemon off``) as a child of the test, everything it writes
under the test's directory; ``stop`` ends it. ``X-Replica`` on each response is the
address of the replica that answered."""

from __future__ import annotations

import asyncio
import shutil
import signal
from collections.abc import Mapping
from pathlib import Path

import aiohttp

from conftest import end_process
from haproxy import free_port

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

#: The recipe of docs/how-to/load-balancer.md (between the markers), around what a test run needs.
_CONFIG = """\
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log {dir}/access.log;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;

    # -- recipe --
    map $http_mcp_session_id $mcp_backend {{
        default replicas;
{routes}
    }}
    upstream replicas {{
{all_servers}
    }}
{one_upstream_each}
    server {{
        listen 127.0.0.1:{port};
        location /mcp {{
            proxy_pass http://$mcp_backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_buffering off;
            proxy_read_timeout 1h;
            proxy_next_upstream error timeout;
            add_header X-Replica $upstream_addr always;
        }}
    }}
    # -- end of recipe --
}}
"""


class Nginx:
    def __init__(self, proc: asyncio.subprocess.Process, port: int, directory: Path) -> None:
        self.proc = proc
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.directory = directory

    @classmethod
    async def start(cls, directory: Path, replicas: Mapping[str, str],
                    seconds: float = 20) -> Nginx:
        """nginx in front of ``replicas`` (name -> the replica's ``/mcp`` URL), once it
        answers."""
        directory.mkdir(parents=True, exist_ok=True)
        port = free_port()
        hosts = {name: url.split("/")[2] for name, url in replicas.items()}
        config = directory / "nginx.conf"
        config.write_text(_CONFIG.format(
            dir=directory, port=port,
            routes="\n".join(f'        "~^{name}[._]" {name};' for name in hosts),
            all_servers="\n".join(f"        server {host};" for host in hosts.values()),
            one_upstream_each="\n".join(f"    upstream {name} {{ server {host}; }}"
                                        for name, host in hosts.items())))
        proc = await asyncio.create_subprocess_exec(
            NGINX, "-c", str(config), "-p", str(directory), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        lb = cls(proc, port, directory)
        for _ in range(int(seconds / 0.05)):
            if proc.returncode is not None:
                break
            try:
                async with aiohttp.ClientSession() as http, http.get(
                        f"http://127.0.0.1:{port}/nothing") as response:
                    await response.read()
                    return lb
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
        await lb.stop()
        raise AssertionError(f"nginx did not start: {lb.output()[-3000:]}")

    def output(self) -> str:
        path = self.directory / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    async def stop(self, seconds: float = 10) -> int | None:
        """Stop nginx (SIGQUIT: its workers finish, then it exits) and reap it."""
        return await end_process(self.proc, signal.SIGQUIT, seconds)

