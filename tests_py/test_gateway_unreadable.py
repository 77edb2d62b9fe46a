"""A request the MCP SDK cannot read on stdio (a lone surrogate escape, an integer past
Python's digit limit, nesting too deep) is answered with a JSON-RPC parse error for its id,
never left unanswered; nothing is reserved or sent, and the gateway goes on serving. A real
gateway process, spoken to line by line."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading

from gateway_rig import HERE, POLICY


def test_a_request_the_sdk_cannot_read_gets_a_parse_error(tmp_path, store_url, store):
    (tmp_path / "ctrlrun.yaml").write_text(POLICY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTRLRUN_")}
    env["UPSTREAM_LOG"] = str(tmp_path / "upstream.log")
    gateway = subprocess.Popen(
        [sys.executable, "-m", "ctrlrun", "gateway", "--name", "acme", "--store", store_url,
         "--", sys.executable, str(HERE / "mcp_upstream.py")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
        env=env)
    lines: "queue.Queue[bytes]" = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in gateway.stdout], daemon=True).start()

    def send(text: str) -> None:
        gateway.stdin.write(text.encode() + b"\n")
        gateway.stdin.flush()

    def answer() -> dict:
        return json.loads(lines.get(timeout=30))

    def call(request_id: int, arguments: str) -> str:
        return ('{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"refund",'
                '"arguments":%s}}' % (request_id, arguments))

    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}))
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
        assert error["message"].startswith("ctrlrun gateway: the request could not be read ("), \
            error
        assert error["message"].endswith("); nothing was sent"), error
    assert got[5]["result"]["isError"] is False, got[5]
    assert [e.effect_key for e in store.list_effects()] == ["refund:pi_ok"]
    runs = (tmp_path / "upstream.log").read_text().splitlines()
    assert [json.loads(r)[1]["payment_id"] for r in runs] == ["pi_ok"]
    assert b"Traceback" not in gateway.stderr.read()
