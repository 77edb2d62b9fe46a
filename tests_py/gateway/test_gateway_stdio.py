"""The agent's stdio, read and written by the gateway's event loop (``ctrlrun.gateway.stdio``): whole
messages whatever their size or the characters in them, an agent that reads slowly, and the
MCP SDK's own transport where stdin or stdout is not a pipe to watch (a file, stdout shared
with stderr). Real gateway processes, spoken to line by line."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List

import pytest

from ctrlrun import open_store
from tests_py.support.gateway_rig import POLICY, Rig, gateway_command

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
READY = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def lookup(request_id: int, payment_id: str) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "lookup", "arguments": {"payment_id": payment_id}},
    }


def gateway(tmp_path: Path, **streams) -> subprocess.Popen:
    (tmp_path / "ctrlrun.yaml").write_text(POLICY)
    argv, env = gateway_command(tmp_path, "--store", f"sqlite:///{tmp_path}/store.db")
    return subprocess.Popen(argv, cwd=tmp_path, env=env, **streams)


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
        return [
            await s.call_tool("lookup", {"payment_id": payment}),
            await s.call_tool("refund", {"payment_id": "pi_1", "amount": 5}),
        ]

    looked, refunded = rig.session(body)
    assert looked.content[0].text == f"payment {payment} is settled"
    assert refunded.structured_content == {"refunded": 5}
    assert "Traceback" not in rig.stderr.read_text()


def test_an_agent_that_reads_slowly_gets_every_answer_in_full(tmp_path):
    # 40 answers of 200 kB each are written before the agent reads any: the gateway waits for
    # the pipe instead of failing, and stops reading requests meanwhile (the writer below
    # blocks then, so it runs on a thread of its own)
    proc = gateway(tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
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
        proc = gateway(
            tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        out, err = proc.communicate(requests.read_bytes(), timeout=60)
    assert proc.returncode == 0, err
    first = answers(out.splitlines())[1]
    assert first["result"]["serverInfo"]["name"] == "ctrlrun-gateway-acme"
    assert b"Traceback" not in err


def test_stdout_shared_with_stderr_is_served(tmp_path):
    # stdout and stderr one pipe (2>&1): the SDK's transport serves it, so stderr never turns
    # non-blocking; the agent sees the gateway's startup line among the messages
    proc = gateway(
        tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
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


WATCHABLE = (
    "import asyncio; from ctrlrun.gateway.stdio import _watchable\n"
    "async def main(): return _watchable()\n"
    "import sys; sys.stderr.write(str(asyncio.run(main())))"
)


@pytest.mark.parametrize(
    "stdin,stderr,expected",
    [
        ("pipe", "pipe", "True"),  # how agent hosts start an MCP server: the loop's own pipes
        ("file", "pipe", "False"),  # the SDK's transport
        ("pipe", "stdout", "False"),  # 2>&1: stdout must stay blocking for stderr's sake
    ],
)
def test_which_transport_serves_the_agent(tmp_path, stdin, stderr, expected):
    (tmp_path / "in").write_text("")
    with open(tmp_path / "in", "rb") as f:
        proc = subprocess.run(
            [sys.executable, "-c", WATCHABLE],
            stdin=f if stdin == "file" else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if stderr == "stdout" else subprocess.PIPE,
            timeout=60,
        )
    said = (proc.stdout if stderr == "stdout" else proc.stderr).decode()
    assert proc.returncode == 0 and said == expected, said


def read_until(sock: socket.socket, request_id: int) -> dict:
    """The agent's side of a socket stdout: lines until the answer to ``request_id``."""
    buffer, got = b"", {}
    while request_id not in got:
        chunk = sock.recv(65536)
        assert chunk, f"the gateway's stdout ended before answer {request_id}: {got}"
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        got.update(answers(lines))
    return got[request_id]


@pytest.mark.parametrize(
    "shape", ["two sockets", "two sockets, stdout half-closed", "one socket both ways"]
)
def test_sockets_for_stdin_and_stdout_are_served(tmp_path, shape):
    # Node's child_process hands a child a socket pair each for stdin and stdout; socat and
    # inetd-style launchers one socket both ways (then the SDK's transport serves). An agent
    # that shuts down the writing side of a socket it only reads has not left.
    agent_in, gw_in = socket.socketpair()
    if shape == "one socket both ways":
        agent_out, gw_out = agent_in, gw_in
    else:
        agent_out, gw_out = socket.socketpair()
    proc = gateway(tmp_path, stdin=gw_in, stdout=gw_out, stderr=subprocess.PIPE)
    gw_in.close()
    gw_out.close()
    agent_out.settimeout(60)
    agent_in.sendall(json.dumps(INIT).encode() + b"\n")
    assert read_until(agent_out, 1)["result"]["serverInfo"]["name"] == "ctrlrun-gateway-acme"
    if shape.endswith("half-closed"):
        agent_out.shutdown(socket.SHUT_WR)
        time.sleep(0.3)
    agent_in.sendall(b"".join(json.dumps(m).encode() + b"\n" for m in (READY, lookup(2, "pi_k"))))
    assert read_until(agent_out, 2)["result"]["content"][0]["text"] == "payment pi_k is settled"
    agent_in.shutdown(socket.SHUT_WR)
    assert proc.wait(30) == 0
    assert b"Traceback" not in proc.stderr.read()


PROBE = (
    "import fcntl, os, sys; sys.stderr.write('blocking after: %s %s' % tuple(not fcntl.fcntl"
    "(fd, fcntl.F_GETFL) & os.O_NONBLOCK for fd in (0, 1)))"
)


@pytest.mark.parametrize("end", ["stdin closed", "SIGTERM", "SIGTERM, then the agent reads"])
def test_an_agent_that_never_reads_still_lets_the_gateway_end_and_its_pipes_stay_blocking(
    tmp_path, end
):
    # 20 answers of 200 kB pile up unread. Closing stdin, or a SIGTERM (whose grace ends in
    # os._exit), still ends the gateway; a shell sharing its pipes finds them blocking again.
    (tmp_path / "ctrlrun.yaml").write_text(POLICY)
    command, env = gateway_command(tmp_path, "--store", f"sqlite:///{tmp_path}/store.db")
    script = (
        " ".join(f"'{a}'" for a in command) + f"; echo rc=$? >&2; '{sys.executable}' -c \"{PROBE}\""
    )
    shell = subprocess.Popen(
        ["sh", "-c", script],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    shell.stdin.write(json.dumps(INIT).encode() + b"\n")
    shell.stdin.flush()
    first = shell.stdout.readline()
    assert first and answers([first])[1]["result"], (first, shell.stderr.read())
    big = [lookup(2 + i, f"p{i}-" + "y" * 200_000) for i in range(20)]

    def send() -> None:
        try:
            for message in [READY, *big]:
                shell.stdin.write(json.dumps(message).encode() + b"\n")
            shell.stdin.flush()
        except BrokenPipeError:
            pass

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    sender.join(5)
    if end == "stdin closed":
        os.close(shell.stdin.fileno())  # even while the sender is blocked in a write
        shell.stdin = None
    else:
        children = f"/proc/{shell.pid}/task/{shell.pid}/children"
        with open(children) as f:  # the shell's one child: the gateway
            os.kill(int(f.read().split()[0]), signal.SIGTERM)
    if end.endswith("reads"):  # as the gateway ends, the lines it had not read yet arrive
        _, err = shell.communicate(timeout=60)
    else:
        err = shell.stderr.read()  # the agent still reads nothing on stdout
    assert shell.wait(60) == 0
    assert b"rc=0" in err and err.endswith(b"blocking after: True True"), err
    assert b"Traceback" not in err


def test_an_agent_that_closes_the_gateways_stdout_ends_the_call_in_flight_ambiguous(tmp_path):
    proc = gateway(tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    slow = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "slow", "arguments": {"payment_id": "pi_gone", "seconds": 20}},
    }
    proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in (INIT, READY, slow)))
    proc.stdin.flush()
    assert answers([proc.stdout.readline()])[1]["result"]
    store = open_store(f"sqlite:///{tmp_path}/store.db")
    deadline = time.monotonic() + 60
    while store.get_effect("slow:pi_gone") is None:  # the call is in flight
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.stdout.close()
    assert proc.wait(60) == 0
    assert store.get_effect("slow:pi_gone").state.value == "ambiguous"
    assert b"Traceback" not in proc.stderr.read()
