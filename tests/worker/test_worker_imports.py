"""What a stdio server's worker process loads: one such process runs per configured
server, so every module it imports is paid once per server (memory, start-up). The HTTP
client, the schema validator, the terminal renderer and the distribution metadata reader
are the parent's or an HTTP worker's business."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import trunkline
from trunkline import _codec

NOT_IN_A_STDIO_WORKER = ("aiohttp", "jsonschema", "rich", "uvicorn", "httptools",
                         "importlib.metadata", "email", "zipfile", "csv")


def test_a_stdio_worker_and_the_worker_template_load_nothing_a_worker_does_not_use():
    code = ("import sys, trunkline.worker.__main__, trunkline.worker.worker, "
            "trunkline.worker.transports.stdio, trunkline.worker.zygote\n"
            f"print(','.join(m for m in {NOT_IN_A_STDIO_WORKER!r} if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == "", f"a stdio worker imports {loaded}"


def test_a_streamable_http_worker_loads_its_own_small_client_and_no_general_one():
    """aiohttp stays the gateway's and the tests' business: an HTTP worker speaks HTTP/1.1
    through ``http_client`` (httptools' parser), which costs it less per request."""
    code = ("import sys, trunkline.worker.__main__, trunkline.worker.transports.http\n"
            # What a worker whose server binds tokens with DPoP loads to sign its proofs.
            "import trunkline.auth.dpop, trunkline.auth.secret\n"
            "print(','.join(m for m in ('aiohttp', 'jsonschema', 'rich', 'uvicorn') "
            "if m in sys.modules), 'httptools' in sys.modules)")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.split()
    assert loaded == ["True"], f"an HTTP worker imports {loaded}"


def test_the_version_is_the_one_written_in_cargo_toml_and_given_to_the_distribution():
    assert trunkline.__version__ == _codec.VERSION == importlib.metadata.version("trunkline")
