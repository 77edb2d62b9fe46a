"""A scripted LLM on CrewAI's LLM interface (``BaseLLM``; no API key, no network): each call
of the model gets the next turn's tool calls (all in one response, which CrewAI runs in
parallel); when none are left, the final answer. What the tools answered is read from the
messages the model was sent."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Tuple

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

from crewai.llms.base_llm import BaseLLM

Call = Tuple[str, str, Dict[str, Any]]  # (call id, tool name, arguments)


def call(name: str, id: str, **args: Any) -> Call:
    return (id, name, args)


class ScriptedLLM(BaseLLM):
    turns: List[List[Call]] = []
    told: Dict[str, str] = {}

    def __init__(self, *turns: List[Call]) -> None:
        super().__init__(model="scripted")
        self.turns = [list(t) for t in turns]
        self.told = {}

    def add(self, *turns: List[Call]) -> None:
        self.turns.extend(list(t) for t in turns)

    def supports_function_calling(self) -> bool:
        return True

    def call(
        self,
        messages: Any,
        tools: Any = None,
        callbacks: Any = None,
        available_functions: Any = None,
        **kwargs: Any,
    ) -> Any:
        for m in messages if isinstance(messages, list) else []:
            if m.get("role") == "tool" and m.get("tool_call_id"):
                self.told[m["tool_call_id"]] = str(m.get("content"))
        if self.turns:
            return [
                {
                    "id": id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                for id, name, args in self.turns.pop(0)
            ]
        return "finished"
