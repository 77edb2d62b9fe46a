"""A scripted Anthropic Messages API on loopback, for running the Claude Code CLI (the Claude
Agent SDK's bundled one) with no network and no key: point ``ANTHROPIC_BASE_URL`` at
:attr:`ScriptedMessages.url` and give any ``ANTHROPIC_API_KEY``.

The script is a list of turns, one per request of the agent loop (a request that offers
tools): each turn is a list of content blocks, made with :func:`text` and :func:`tool_use`,
streamed back as the API's server-sent events (``message_start``, ``content_block_*``,
``message_delta`` with ``stop_reason`` ``tool_use`` when the turn calls a tool,
``message_stop``). Once the script is spent, every loop request is answered with "done".
Requests that offer no tools (a title, a topic check the CLI asks of a small model) are
answered with a short text and are not turns.

Every loop request is kept (:attr:`requests`), so a test reads what the model was told: the
``tool_result`` blocks of the request after a tool call (:meth:`tool_results`)."""

from __future__ import annotations

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List, Optional

__all__ = ["ScriptedMessages", "text", "tool_use"]

Block = Dict[str, Any]

_ids = itertools.count(1)


def text(words: str) -> Block:
    return {"type": "text", "text": words}


def tool_use(name: str, arguments: Dict[str, Any], call_id: Optional[str] = None) -> Block:
    """A tool call; ``name`` as the model sees it (``mcp__<server>__<tool>`` for an SDK MCP
    tool)."""
    return {
        "type": "tool_use",
        "id": call_id or f"toolu_{next(_ids):04d}",
        "name": name,
        "input": arguments,
    }


def _events(blocks: List[Block], model: str) -> Iterator[bytes]:
    def event(kind: str, data: Dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()

    calls = any(b["type"] == "tool_use" for b in blocks)
    usage = {
        "input_tokens": 10,
        "output_tokens": 1,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    yield event(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": f"msg_{next(_ids):04d}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage,
            },
        },
    )
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            start: Block = {"type": "text", "text": ""}
            delta: Block = {"type": "text_delta", "text": block["text"]}
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield event(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        )
        yield event(
            "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        )
        yield event("content_block_stop", {"type": "content_block_stop", "index": index})
    yield event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
    )
    yield event("message_stop", {"type": "message_stop"})


def _message(blocks: List[Block], model: str) -> Dict[str, Any]:
    calls = any(b["type"] == "tool_use" for b in blocks)
    return {
        "id": f"msg_{next(_ids):04d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


class ScriptedMessages:
    """The server; a context manager (started on enter, stopped on exit)."""

    def __init__(self, turns: Optional[List[List[Block]]] = None) -> None:
        self.turns: List[List[Block]] = list(turns or [])
        self.requests: List[Dict[str, Any]] = []  # the loop's requests, as sent
        self.other: List[str] = []  # every other request: "METHOD path"
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def env(self) -> Dict[str, str]:
        """What the CLI needs to talk to this server and nothing else."""
        return {
            "ANTHROPIC_BASE_URL": self.url,
            "ANTHROPIC_API_KEY": "sk-ant-scripted-not-a-key",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_BUG_COMMAND": "1",
            "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
            "CLAUDE_CODE_ENABLE_TELEMETRY": "0",
            # the MCP tools in the prompt, as a model that loaded them would have them (a
            # deferred tool's error result gets an "input schema was not in your prompt" hint)
            "ENABLE_TOOL_SEARCH": "false",
            # anything else the CLI would reach goes through this server, which refuses it and
            # keeps it in `other` (a test asserts there is none)
            "HTTPS_PROXY": self.url,
            "HTTP_PROXY": self.url,
            "https_proxy": self.url,
            "http_proxy": self.url,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }

    def __enter__(self) -> ScriptedMessages:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add(self, *turns: List[Block]) -> None:
        with self._lock:
            self.turns.extend(turns)

    def tool_results(self) -> List[Block]:
        """Every ``tool_result`` block the CLI sent back, in order (one per tool call)."""
        seen: Dict[str, Block] = {}
        for body in self.requests:
            for message in body.get("messages", []):
                content = message.get("content")
                if message.get("role") != "user" or not isinstance(content, list):
                    continue
                for block in content:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        seen.setdefault(block["tool_use_id"], block)
        return list(seen.values())

    def result_text(self, call_id: str) -> str:
        """The text the model was told for the tool call ``call_id``."""
        for block in self.tool_results():
            if block["tool_use_id"] == call_id:
                content = block.get("content")
                if isinstance(content, str):
                    return content
                return "\n".join(c.get("text", "") for c in content or [] if isinstance(c, dict))
        raise AssertionError(f"no tool_result for {call_id}; results: {self.tool_results()}")

    def _answer(self, body: Dict[str, Any]) -> List[Block]:
        if not body.get("tools"):
            return [text("ok")]
        with self._lock:
            self.requests.append(body)
            return self.turns.pop(0) if self.turns else [text("done")]

    def _handler(self) -> type:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _reply(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_CONNECT(self) -> None:
                outer.other.append(f"CONNECT {self.path}")
                self._reply(403, {"type": "error", "error": {"type": "offline"}})

            def do_GET(self) -> None:
                outer.other.append(f"GET {self.path}")
                self._reply(404, {"type": "error", "error": {"type": "not_found_error"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                path = self.path.split("?", 1)[0]
                if path != "/v1/messages":
                    outer.other.append(f"POST {self.path}")
                    if path.endswith("/count_tokens"):
                        self._reply(200, {"input_tokens": 10})
                    else:
                        self._reply(404, {"type": "error", "error": {"type": "not_found_error"}})
                    return
                body = json.loads(raw or b"{}")
                blocks = outer._answer(body)
                model = body.get("model", "claude-scripted")
                if not body.get("stream"):
                    self._reply(200, _message(blocks, model))
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                for chunk in _events(blocks, model):
                    self.wfile.write(chunk)
                self.wfile.flush()
                self.close_connection = True

        return Handler
