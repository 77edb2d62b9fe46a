"""The gateway test rig: a real MCP client (the SDK's ``ClientSession`` over stdio) talking to
``ctrlrun gateway`` in its own process, which starts the real upstream MCP server
tests_py/support/mcp_upstream.py; the upstream logs every execution to a file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

HERE = Path(__file__).parent
POLICY = """\
schema: ctrlrun.policy/v2
actions:
  mcp.acme.refund:
    effect: "refund:{payment_id}"
  mcp.acme.flaky:
    effect: "flaky:{payment_id}"
  mcp.acme.slow:
    effect: "slow:{payment_id}"
    call_timeout: 1s
  mcp.acme.die:
    effect: "die:{payment_id}"
"""


UPSTREAM = ["--", sys.executable, str(HERE / "mcp_upstream.py")]


def gateway_command(
    tmp_path: Path, *options: str, upstream: Sequence[str] = UPSTREAM
) -> Tuple[List[str], Dict[str, str]]:
    """The command line and environment of ``ctrlrun gateway --name acme`` with ``options``, in
    front of ``upstream`` (``--`` and its command; default the test upstream,
    tests_py/support/mcp_upstream.py, which logs each call to tmp_path/upstream.log): the
    environment without the caller's ``CTRLRUN_*``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTRLRUN_")}
    env["UPSTREAM_LOG"] = str(tmp_path / "upstream.log")
    return [sys.executable, "-m", "ctrlrun", "gateway", "--name", "acme", *options, *upstream], env


class Rig:
    def __init__(
        self,
        tmp_path: Path,
        store_url: str,
        policy: str,
        upstream: Optional[List[str]] = None,
        options: Sequence[str] = (),
    ) -> None:
        self.upstream = upstream or UPSTREAM
        self.options = list(options)  # more of the gateway's options
        self.tmp = tmp_path
        self.store_url = store_url
        self.log = tmp_path / "upstream.log"
        self.policy = tmp_path / "ctrlrun.yaml"
        self.policy.write_text(policy)
        self.stderr = tmp_path / "gateway.err"

    def runs(self) -> List[list]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def session(self, body: Callable[[ClientSession], Awaitable[Any]], **client: Any) -> Any:
        """Run ``body`` with a client session on a new gateway process; ``client`` goes to
        the ``ClientSession`` (its callbacks)."""
        argv, env = gateway_command(
            self.tmp,
            "--policy",
            str(self.policy),
            "--store",
            self.store_url,
            *self.options,
            upstream=self.upstream,
        )
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=str(self.tmp))

        async def main() -> Any:
            with open(self.stderr, "a") as err:
                async with stdio_client(params, errlog=err) as (r, w):
                    async with ClientSession(r, w, **client) as s:
                        with anyio.fail_after(120):  # a hung gateway fails the test
                            await s.initialize()
                            return await body(s)

        return anyio.run(main)

    def calls(self, *calls: tuple) -> list:
        async def body(s: ClientSession) -> list:
            return [await s.call_tool(name, args) for name, args in calls]

        return self.session(body)


def ctrl(result) -> Dict[str, Any]:
    assert result.is_error, result
    return result.structured_content["ctrlrun"]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen) -> None:
    import socket
    import time

    deadline = time.time() + 30
    while time.time() < deadline:
        assert proc.poll() is None, "the server exited"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}")


def listening_gateway(tmp_path: Path, store_url: str, policy: str) -> tuple[subprocess.Popen, int]:
    """``ctrlrun gateway --listen`` (agents over streamable HTTP) in front of the test upstream
    on stdio, with ``policy`` in the working directory; the process and its port, once it
    listens."""
    port = free_port()
    (tmp_path / "ctrlrun.yaml").write_text(policy)
    argv, env = gateway_command(tmp_path, "--listen", f"127.0.0.1:{port}", "--store", store_url)
    gateway = subprocess.Popen(argv, env=env, cwd=str(tmp_path), stdin=subprocess.DEVNULL)
    try:
        wait_for_port(port, gateway)
    except BaseException:
        gateway.kill()
        gateway.wait()
        raise
    return gateway, port
