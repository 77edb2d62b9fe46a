"""Lines that are no MCP message. From the agent on stdio: a request the MCP SDK cannot read (a
lone surrogate escape, an integer past Python's digit limit, nesting too deep) is answered with
a JSON-RPC parse error for its id, never left unanswered; nothing is reserved or sent, and the
gateway goes on serving (a real gateway process, spoken to line by line). From the upstream: a
stray line is one line on the gateway's stderr, never a traceback."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading

import pytest

from tests_py.support.gateway_rig import POLICY, Rig, gateway_command


def test_a_request_the_sdk_cannot_read_gets_a_parse_error(tmp_path, store_url, store):
    (tmp_path / "ctrlrun.yaml").write_text(POLICY)
    argv, env = gateway_command(tmp_path, "--store", store_url)
    gateway = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )
    lines: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in gateway.stdout], daemon=True).start()

    def send(text: str) -> None:
        gateway.stdin.write(text.encode() + b"\n")
        gateway.stdin.flush()

    def answer() -> dict:
        return json.loads(lines.get(timeout=30))

    def call(request_id: int, arguments: str) -> str:
        return (
            '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"refund",'
            '"arguments":%s}}' % (request_id, arguments)
        )

    try:
        send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {},
                        "clientInfo": {"name": "t", "version": "1"},
                    },
                }
            )
        )
        assert answer()["id"] == 1
        send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        send(call(2, '{"payment_id":"pi\\ud800","amount":1}'))
        send(call(3, '{"payment_id":"pi_big","amount":%s}' % ("9" * 5000)))
        send(call(4, '{"payment_id":"pi_deep","amount":%s}' % ("[" * 300 + "]" * 300)))
        send(call(5, '{"payment_id":"pi_ok","amount":1}'))
        got = {a["id"]: a for a in (answer() for _ in range(4))}
    finally:
        gateway.stdin.close()
        gateway.wait(30)
    for request_id in (2, 3, 4):
        error = got[request_id]["error"]
        assert error["code"] == -32700, got[request_id]
        assert error["message"].startswith("ctrlrun gateway: the request could not be read ("), (
            error
        )
        assert error["message"].endswith("); nothing was sent"), error
    assert got[5]["result"]["isError"] is False, got[5]
    assert [e.effect_key for e in store.list_effects()] == ["refund:pi_ok"]
    runs = (tmp_path / "upstream.log").read_text().splitlines()
    assert [json.loads(r)[1]["payment_id"] for r in runs] == ["pi_ok"]
    assert b"Traceback" not in gateway.stderr.read()


NOISY_UPSTREAM = """
import json, sys
def out(o):
    sys.stdout.write(json.dumps(o) + "\\n"); sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line)
    if m.get("method") == "initialize":
        out({"jsonrpc": "2.0", "id": m["id"], "result": {"protocolVersion": "2025-11-25",
             "capabilities": {"tools": {}}, "serverInfo": {"name": "noisy", "version": "0"}}})
    elif m.get("method") == "tools/list":
        out({"jsonrpc": "2.0", "id": m["id"], "result": {"tools": [
            {"name": "refund", "inputSchema": {"type": "object"}}]}})
    elif m.get("method") == "tools/call":
        sys.stdout.write("progress: 50%% done, not JSON-RPC\\n")  # a print() to the wire
        out({"jsonrpc": "2.0", "id": m["id"], "result": {"content": [
            {"type": "text", "text": "ok"}]}})
"""


def test_an_upstream_printing_to_its_stdout_gets_one_stderr_line_per_line(
    tmp_path, store_url, store
):
    """A line the upstream writes to the wire that is no MCP message (a stray print) is logged
    by the SDK: one line on the gateway's stderr, never a traceback; the call goes through."""
    (tmp_path / "noisy.py").write_text(NOISY_UPSTREAM)
    rig = Rig(
        tmp_path, store_url, POLICY, upstream=["--", sys.executable, str(tmp_path / "noisy.py")]
    )
    first, second = rig.calls(
        ("refund", {"payment_id": "pi_n1", "amount": 1}),
        ("refund", {"payment_id": "pi_n2", "amount": 1}),
    )
    assert not first.is_error and not second.is_error
    assert store.get_effect("refund:pi_n1").state.value == "committed"
    err = rig.stderr.read_text()
    assert "Traceback" not in err, err
    noted = [
        line for line in err.splitlines() if line.startswith("ctrlrun gateway acme: the MCP SDK: ")
    ]
    assert len(noted) == 2, err  # one line for each stray line


@pytest.mark.parametrize("replay", [False, True])
def test_a_row_edited_by_hand_is_a_store_refusal_for_the_agent(
    tmp_path, store_url, store, raw, replay
):
    """A committed row whose result (or time) was edited into what no record holds: the
    agent's retry gets a tool error result saying the row cannot be read (nothing is sent),
    with replay and without, never a JSON-RPC error or a traceback on the gateway's stderr."""
    policy = (
        POLICY.replace(
            'effect: "refund:{payment_id}"', 'effect: "refund:{payment_id}"\n    replay: true'
        )
        if replay
        else POLICY
    )
    rig = Rig(tmp_path, store_url, policy)
    (first,) = rig.calls(("refund", {"payment_id": "pi_e", "amount": 5}))
    assert not first.is_error
    raw.run(
        "UPDATE ctrlrun_effects SET result = '{\"refunded\": 5', "
        "receipt_seq = receipt_seq + 1 WHERE effect_key = 'refund:pi_e'"
    )
    (again,) = rig.calls(("refund", {"payment_id": "pi_e", "amount": 5}))
    assert again.is_error and again.structured_content["ctrlrun"]["refused"] == "store", again
    text = again.content[0].text
    assert "refund:pi_e" in text and "is not JSON" in text and "nothing was sent" in text, text
    assert len(rig.runs()) == 1
    assert "Traceback" not in rig.stderr.read_text()


def test_the_sdk_log_is_one_line_while_serving_and_as_it_was_after(capsys):
    """While a gateway serves, an SDK record is one line on stderr, the exception's message
    and no traceback, and it does not reach the root logger; afterwards the ``mcp`` logger is
    as it was (two gateways served at once in one process share one handler)."""
    import logging

    from ctrlrun.gateway.serve import _quiet_sdk_log

    sdk = logging.getLogger("mcp")
    before = (list(sdk.handlers), sdk.propagate)
    seen = []

    class Root(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    root = Root()
    logging.getLogger().addHandler(root)
    try:
        with _quiet_sdk_log("acme"), _quiet_sdk_log("other"):
            try:
                raise ValueError("not JSON")
            except ValueError:
                logging.getLogger("mcp.client.stdio").exception("Failed to parse\nthe message")
        logging.getLogger("mcp.client.stdio").error("after serving")
    finally:
        logging.getLogger().removeHandler(root)
    assert (list(sdk.handlers), sdk.propagate) == before
    err = capsys.readouterr().err
    assert err.splitlines() == ["ctrlrun gateway acme: the MCP SDK: Failed to parse (not JSON)"], (
        err
    )
    assert seen == ["after serving"]
