"""The gateway over streamable HTTP, end to end: the upstream reached at a URL, agents served
on ``--listen``, and the proof that a call was never sent when the upstream cannot be reached
(its POST got no connection), without a ping before each call. Both backends."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR

from tests_py.support.gateway_rig import (
    HERE,
    POLICY,
    Rig,
    ctrl,
    free_port,
    listening_gateway,
    wait_for_port,
)


def _http_upstream(tmp_path, port: int) -> subprocess.Popen:
    env = dict(
        os.environ,
        UPSTREAM_LOG=str(tmp_path / "upstream.log"),
        UPSTREAM_PINGS=str(tmp_path / "pings.log"),
    )
    upstream = subprocess.Popen(
        [sys.executable, str(HERE / "mcp_upstream.py"), "--http", str(port)], env=env
    )
    wait_for_port(port, upstream)
    return upstream


def _rig_over_http(tmp_path, store_url, *options: str):
    """A running HTTP upstream on a free port, and a gateway rig in front of it (with
    ``options`` before ``--upstream-url``): ``(port, upstream process, rig)``."""
    port = free_port()
    upstream = _http_upstream(tmp_path, port)
    rig = Rig(
        tmp_path,
        store_url,
        POLICY,
        upstream=[*options, "--upstream-url", f"http://127.0.0.1:{port}/mcp"],
    )
    return port, upstream, rig


def test_an_upstream_over_streamable_http(tmp_path, store_url, store):
    _, upstream, rig = _rig_over_http(tmp_path, store_url)
    try:
        first, again = rig.calls(
            ("refund", {"payment_id": "pi_h", "amount": 3}),
            ("refund", {"payment_id": "pi_h", "amount": 3}),
        )
        assert not first.is_error and ctrl(again)["refused"] == "committed"
        assert len(rig.runs()) == 1
    finally:
        upstream.kill()
        upstream.wait()


def test_agents_over_streamable_http(tmp_path, store_url, store):
    from mcp.client.streamable_http import streamable_http_client

    gateway, port = listening_gateway(tmp_path, store_url, POLICY)
    try:

        async def main() -> list:
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (r, w):
                async with ClientSession(r, w) as s:
                    await s.initialize()
                    return [
                        await s.call_tool("refund", {"payment_id": "pi_l", "amount": 4})
                        for _ in range(2)
                    ]

        first, again = anyio.run(main)
        assert not first.is_error and ctrl(again)["refused"] == "committed"
        assert store.get_effect("refund:pi_l").state.value == "committed"
    finally:
        gateway.terminate()
        gateway.wait(30)


@pytest.mark.filterwarnings(
    "ignore::mcp.shared.exceptions.MCPDeprecationWarning"
)  # 2025-era requests, on purpose
def test_an_http_upstream_that_cannot_be_reached_gets_calls_recorded_failed_unsent(
    tmp_path, store_url, store
):
    _port, upstream, rig = _rig_over_http(tmp_path, store_url)

    async def body(s: ClientSession) -> list:
        out = [await s.call_tool("refund", {"payment_id": "pi_u", "amount": 1})]
        upstream.kill()
        upstream.wait()
        started = time.monotonic()
        out.append(await s.call_tool("refund", {"payment_id": "pi_v", "amount": 2}))
        out.append(await s.call_tool("refund", {"payment_id": "pi_w", "amount": 3}))
        out.append(time.monotonic() - started)
        for ask in (s.list_tools(), s.read_resource("memo://notes"), s.set_logging_level("error")):
            try:
                await ask
                out.append(None)
            except MCPError as exc:
                out.append(exc.error)
        return out

    try:
        done, first, second, took, *errors = rig.session(body)
    finally:
        upstream.kill()
        upstream.wait()
    assert not done.is_error and store.get_effect("refund:pi_u").state.value == "committed"
    # no ping came before the call that went through: the proof is the connection itself
    assert not (tmp_path / "pings.log").exists()
    # the first POST found nothing listening, and the second call's reconnection found
    # nothing either: neither call was sent, so both are failed, at once (not after the 60 s
    # call timeout)
    for result, key in ((first, "refund:pi_v"), (second, "refund:pi_w")):
        assert ctrl(result)["outcome"] == "failed", result
        assert "was not sent" in result.content[0].text, result
        assert store.get_effect(key).state.value == "failed"
    assert took < 20, took
    # the requests other than tool calls get a JSON-RPC error that says why, and the
    # gateway's stderr shows no traceback
    for error in errors:
        assert error is not None and error.code == INTERNAL_ERROR, errors
        assert error.message.startswith(
            "ctrlrun gateway: the upstream MCP server's "
            "connection has ended and it could not be reached "
            "again ("
        ), error
    assert "Traceback" not in rig.stderr.read_text()
    lines = rig.stderr.read_text().splitlines()
    assert any(
        line.startswith("ctrlrun gateway acme: the connection to the upstream failed (")
        and line.endswith(
            "the next request reconnects (a reserved call that cannot be sent is recorded failed)"
        )
        for line in lines
    ), lines
    assert "could not be reached again" in second.content[0].text, second
    assert [r[0] for r in rig.runs()] == ["refund"]


@pytest.mark.filterwarnings(
    "ignore::mcp.shared.exceptions.MCPDeprecationWarning"
)  # 2025-era requests, on purpose
def test_an_http_upstream_that_comes_back_is_reconnected_without_restarting_the_gateway(
    tmp_path, store_url, store
):
    port, upstream, rig = _rig_over_http(tmp_path, store_url)

    async def body(s: ClientSession) -> list:
        nonlocal upstream
        out = [await s.call_tool("refund", {"payment_id": "pi_r1", "amount": 1})]
        await s.subscribe_resource("memo://notes")
        await s.set_logging_level("warning")
        upstream.kill()
        upstream.wait()
        out.append(await s.call_tool("refund", {"payment_id": "pi_r2", "amount": 2}))
        upstream = _http_upstream(tmp_path, port)  # the upstream restarts on its address
        out.append(await s.call_tool("refund", {"payment_id": "pi_r2", "amount": 2}))
        out.append(await s.call_tool("refund", {"payment_id": "pi_r2", "amount": 2}))
        out.append(await s.read_resource("memo://notes"))
        return out

    try:
        first, unsent, retried, again, notes = rig.session(body)
    finally:
        upstream.kill()
        upstream.wait()
    assert not first.is_error
    # while it is down, the call is never sent: failed, so the agent's retry may run ...
    assert ctrl(unsent)["outcome"] == "failed", unsent
    # ... and once it is back, the retry goes through on a new connection, once
    assert not retried.is_error, retried
    assert ctrl(again)["refused"] == "committed"
    assert store.get_effect("refund:pi_r2").state.value == "committed"
    assert [r[0] for r in rig.runs()] == ["refund", "refund"]
    # the new upstream session holds the subscription and the log level the agent set on
    # the old one
    assert "level=warning subscribed=memo://notes" in notes.contents[0].text, notes
    lines = rig.stderr.read_text().splitlines()
    assert (
        f"ctrlrun gateway acme: reconnected to the upstream http://127.0.0.1:{port}/mcp" in lines
    ), lines


class _SlowAnswer(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(0.5)
        body = b'{"jsonrpc": "2.0", "id": 1, "result": {"content": []}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_only_the_call_whose_own_post_got_no_connection_is_proven_unsent():
    """Two calls with the same tool and arguments at once: the one whose POST reached a server
    is never taken for the one whose POST found nothing listening (the gateway's HTTP client,
    a real server and a port nobody listens on)."""
    import httpx2

    from ctrlrun.gateway.http import http_client, watching

    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowAnswer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    live = f"http://127.0.0.1:{server.server_address[1]}/mcp"
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "refund", "arguments": {"payment_id": "pi_1"}},
    }
    seen: dict = {}

    async def send(label: str, url: str, wait: float) -> None:
        with watching("refund", {"payment_id": "pi_1"}) as (scope, _):
            await anyio.sleep(wait)
            try:
                await client.post(url, json=body)
                seen[label] = "answered"
            except httpx2.ConnectError:
                seen[label] = "no connection"
        seen[label + " proven unsent"] = scope.cancel_called

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            # the dead one is watched first and posts last, while the live one is in flight
            tg.start_soon(send, "dead", dead, 0.2)
            tg.start_soon(send, "live", live, 0.05)

    client = http_client()
    try:
        anyio.run(main)
    finally:
        anyio.run(client.aclose)
        server.shutdown()
    assert seen == {
        "dead": "no connection",
        "dead proven unsent": True,
        "live": "answered",
        "live proven unsent": False,
    }


def test_an_http_upstream_restarted_between_calls_is_reconnected_for_the_next_call(
    tmp_path, store_url, store
):
    """The upstream restarts while no call is in flight: the gateway's next POST carries a
    session it no longer knows, which it answers 404 (the MCP transport's rule). That call
    is ambiguous (a 404 does not prove it did not run), and the connection is over: the next
    call goes out on a new session and runs once."""
    port, upstream, rig = _rig_over_http(tmp_path, store_url)

    async def body(s: ClientSession) -> list:
        nonlocal upstream
        out = [await s.call_tool("refund", {"payment_id": "pi_s1", "amount": 1})]
        upstream.kill()
        upstream.wait()
        upstream = _http_upstream(tmp_path, port)
        out.append(await s.call_tool("refund", {"payment_id": "pi_s2", "amount": 2}))
        out.append(await s.call_tool("refund", {"payment_id": "pi_s3", "amount": 3}))
        return out

    try:
        first, stale, fresh = rig.session(body)
    finally:
        upstream.kill()
        upstream.wait()
    assert not first.is_error
    assert ctrl(stale)["outcome"] == "ambiguous", stale
    assert store.get_effect("refund:pi_s2").state.value == "ambiguous"
    assert not fresh.is_error, fresh
    assert store.get_effect("refund:pi_s3").state.value == "committed"
    assert [r[0] for r in rig.runs()] == ["refund", "refund"]  # pi_s1, pi_s3
    assert any(
        line.startswith("ctrlrun gateway acme: reconnected to the upstream")
        for line in rig.stderr.read_text().splitlines()
    )


def test_requests_that_find_the_upstream_gone_wait_for_a_reconnection_at_most_the_timeout(
    tmp_path, store_url, store
):
    """The upstream's address now accepts connections and never answers: the reconnection's
    handshake is bounded by the call timeout, and so is each request's wait for the attempt
    in progress (four calls each waiting for the one before would take four timeouts).
    Nothing is sent, so each is recorded failed."""
    import socket

    port, upstream, rig = _rig_over_http(tmp_path, store_url, "--call-timeout", "3")
    silent = socket.socket()

    async def body(s: ClientSession) -> list:
        out = [await s.call_tool("refund", {"payment_id": "pi_q0", "amount": 1})]
        upstream.kill()
        upstream.wait()
        out.append(await s.call_tool("refund", {"payment_id": "pi_q1", "amount": 1}))
        silent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        silent.bind(("127.0.0.1", port))
        silent.listen(16)  # the kernel accepts; nobody ever answers
        started = time.monotonic()
        results: dict = {}

        async def one(i: int) -> None:
            results[i] = await s.call_tool("refund", {"payment_id": f"pi_q{i}", "amount": 1})

        async with anyio.create_task_group() as tg:
            for i in range(2, 6):
                tg.start_soon(one, i)
        out.append(time.monotonic() - started)
        out.append(results)
        return out

    try:
        first, unsent, took, results = rig.session(body)
    finally:
        upstream.kill()
        upstream.wait()
        silent.close()
    assert not first.is_error and ctrl(unsent)["outcome"] == "failed"
    # each waits at most its 3 s; four attempts in turn would take 12 s
    assert took < 8, took
    for i, result in results.items():
        assert ctrl(result)["outcome"] == "failed", result
        assert "could not be reached again" in result.content[0].text, result
        assert store.get_effect(f"refund:pi_q{i}").state.value == "failed"
    assert [r[0] for r in rig.runs()] == ["refund"]
