"""The agent's stdio, read and written by the gateway's event loop (``_gateway_stdio``): whole
messages whatever their size or the characters in them, an agent that reads slowly, and the
MCP SDK's own transport where stdin or stdout is not a pipe to watch (a file, stdout shared
with stderr). Real gateway processes, spoken to line by line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import List

import pytest
from gateway_rig import HERE, POLICY, Rig

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"}}}
READY = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def lookup(request_id: int, payment_id: str) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "lookup", "arguments": {"payment_id": payment_id}}}


def gateway(tmp_path: Path, **streams) -> subprocess.Popen:
    (tmp_path / "ctrlrun.yaml").write_text(POLICY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTRLRUN_")}
    env["UPSTREAM_LOG"] = str(tmp_path / "upstream.log")
    return subprocess.Popen(
        [sys.executable, "-m", "ctrlrun", "gateway", "--name", "acme", "--store",
         f"sqlite:///{tmp_path}/store.db", "--", sys.executable, str(HERE / "mcp_upstream.py")],
        cwd=tmp_path, env=env, **streams)


def answers(lines: List[bytes]) -> dict:
    """The JSON-RPC answers among ``lines``, by id (other lines, such as stderr's, left out)."""
    out = {}
    for line in lines:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict) and "id" in message:
            out[message["id"]] = message
    return out


def test_large_messages_and_raw_line_separators_cross_the_gateway_whole(tmp_path):
    # 300 kB each way (many pipe buffers), and characters other readers take for line ends:
    # U+2028 and U+2029 travel raw in JSON, CR and the rest escaped
    rig = Rig(tmp_path, f"sqlite:///{tmp_path}/store.db", POLICY)
    payment = "x" * 300_000 + "\u2028\u2029\r\x0b\x0c\x1c\x85é€😀"

    async def body(s) -> list:
        return [await s.call_tool("lookup", {"payment_id": payment}),
                await s.call_tool("refund", {"payment_id": "pi_1", "amount": 5})]

    looked, refunded = rig.session(body)
    assert looked.content[0].text == f"payment {payment} is settled"
    assert refunded.structured_content == {"refunded": 5}
    assert "Traceback" not in rig.stderr.read_text()


def test_an_agent_that_reads_slowly_gets_every_answer_in_full(tmp_path):
    # 40 answers of 200 kB each are written before the agent reads any: the gateway waits for
    # the pipe instead of failing, and stops reading requests meanwhile (the writer below
    # blocks then, so it runs on a thread of its own)
    proc = gateway(tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE)
    requests = [INIT, READY] + [lookup(2 + i, f"p{i}-" + "y" * 200_000) for i in range(40)]

    def send() -> None:
        for message in requests:
            proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    sender.join(0.5)
    got = {}
    for line in proc.stdout:
        got.update(answers([line]))
        if len(got) == 41:
            break
    sender.join(30)
    proc.stdin.close()
    assert proc.wait(30) == 0
    assert sorted(got) == list(range(1, 42))
    for i in range(40):
        text = got[2 + i]["result"]["content"][0]["text"]
        assert text == f"payment p{i}-{'y' * 200_000} is settled"
    assert b"Traceback" not in proc.stderr.read()


@pytest.mark.parametrize("stdin", ["file", "pipe"])
def test_stdin_as_a_file_or_a_pipe_is_served(tmp_path, stdin):
    # a file cannot be watched by the loop: the MCP SDK's own transport serves it
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps(m) + "\n" for m in (INIT, READY)))
    if stdin == "file":
        with open(requests, "rb") as f:
            proc = gateway(tmp_path, stdin=f, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            out, err = proc.communicate(timeout=60)
    else:
        proc = gateway(tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
        out, err = proc.communicate(requests.read_bytes(), timeout=60)
    assert proc.returncode == 0, err
    first = answers(out.splitlines())[1]
    assert first["result"]["serverInfo"]["name"] == "ctrlrun-gateway-acme"
    assert b"Traceback" not in err


def test_stdout_shared_with_stderr_is_served(tmp_path):
    # stdout and stderr one pipe (2>&1): the SDK's transport serves it, so stderr never turns
    # non-blocking; the agent sees the gateway's startup line among the messages
    proc = gateway(tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                   stderr=subprocess.STDOUT)
    body = "".join(json.dumps(m) + "\n" for m in (INIT, READY, lookup(2, "pi_s")))
    proc.stdin.write(body.encode())
    proc.stdin.flush()
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if 2 in answers(lines):
            break
    proc.stdin.close()
    lines += proc.stdout.readlines()
    assert proc.wait(30) == 0
    got = answers(lines)
    assert got[2]["result"]["content"][0]["text"] == "payment pi_s is settled"
    assert any(line.startswith(b"ctrlrun gateway acme: ") for line in lines)
    assert not any(b"Traceback" in line for line in lines)


WATCHABLE = ("import asyncio; from ctrlrun._gateway_stdio import _watchable\n"
             "async def main(): return _watchable()\n"
             "import sys; sys.stderr.write(str(asyncio.run(main())))")


@pytest.mark.parametrize("stdin,stderr,expected", [
    ("pipe", "pipe", "True"),        # how agent hosts start an MCP server: the loop's own pipes
    ("file", "pipe", "False"),       # the SDK's transport
    ("pipe", "stdout", "False"),     # 2>&1: stdout must stay blocking for stderr's sake
])
def test_which_transport_serves_the_agent(tmp_path, stdin, stderr, expected):
    (tmp_path / "in").write_text("")
    with open(tmp_path / "in", "rb") as f:
        proc = subprocess.run(
            [sys.executable, "-c", WATCHABLE], stdin=f if stdin == "file" else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if stderr == "stdout" else subprocess.PIPE, timeout=60)
    said = (proc.stdout if stderr == "stdout" else proc.stderr).decode()
    assert proc.returncode == 0 and said == expected, said
