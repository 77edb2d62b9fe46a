"""A scripted model on Strands' model interface (no API key): each model request gets the next
turn's tool calls (all in one assistant message, so Strands runs them concurrently); when none
are left, a text that ends the run. What the tools answered is read from the agent's messages."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple

from strands.models import Model

Call = Tuple[str, str, Dict[str, Any]]  # (toolUseId, tool name, input)


def call(name: str, id: str, **args: Any) -> Call:
    return (id, name, args)


class ScriptedModel(Model):
    def __init__(self, *turns: List[Call]) -> None:
        self.turns = [list(t) for t in turns]
        self.requests = 0

    def add(self, *turns: List[Call]) -> None:
        self.turns.extend(list(t) for t in turns)

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    def structured_output(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def stream(
        self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        self.requests += 1
        yield {"messageStart": {"role": "assistant"}}
        if self.turns:
            for id, name, args in self.turns.pop(0):
                yield {"contentBlockStart": {"start": {"toolUse": {"toolUseId": id, "name": name}}}}
                yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(args)}}}}
                yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "tool_use"}}
            return
        yield {"contentBlockStart": {"start": {}}}
        yield {"contentBlockDelta": {"delta": {"text": "finished"}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "end_turn"}}


def results(agent: Any) -> Dict[str, Dict[str, Any]]:
    """Every tool result in the agent's messages, by toolUseId: {"status", "text"}."""
    out: Dict[str, Dict[str, Any]] = {}
    for message in agent.messages:
        for block in message.get("content", []):
            result: Optional[Dict[str, Any]] = block.get("toolResult")
            if result is not None:
                text = "".join(c.get("text", "") for c in result.get("content", []))
                out[result["toolUseId"]] = {"status": result["status"], "text": text}
    return out
