"""A scripted model on ADK's model interface (``BaseLlm``), and the real ``InMemoryRunner``
agent loop it drives: no API key, no network. Each model turn is what the script says next:
a list of function calls (two identical ones make parallel twins) or a final text. The
function responses the model was sent are kept (``model.told``)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, AsyncGenerator, Dict, List, Optional, Tuple

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types
from pydantic import PrivateAttr

Call = Tuple[str, Dict[str, Any]]
CONFIRMATION = "adk_request_confirmation"


class ScriptedModel(BaseLlm):
    """Answers each model turn with the next entry of ``script``: a list of ``(tool, args)``
    calls (made in one response, in parallel), or a text (the final answer)."""

    model: str = "scripted"
    _script: List[Any] = PrivateAttr(default_factory=list)
    _told: List[Dict[str, Any]] = PrivateAttr(default_factory=list)

    def __init__(self, script: List[Any]) -> None:
        super().__init__(model="scripted")
        self._script = list(script)

    @property
    def told(self) -> List[Dict[str, Any]]:
        """Every function response the model was sent: name, id, response."""
        return self._told

    def results(self, tool: str) -> List[Any]:
        """The ``result`` (else the whole response) of each response of ``tool``."""
        out = []
        for r in self._told:
            if r["name"] == tool:
                out.append(r["response"].get("result", r["response"]))
        return out

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1] if llm_request.contents else None
        for part in (last.parts or []) if last is not None else []:
            fr = part.function_response
            if fr is not None:
                self._told.append({"name": fr.name, "id": fr.id, "response": fr.response or {}})
        step = self._script.pop(0) if self._script else "done"
        if isinstance(step, str):
            parts = [types.Part.from_text(text=step)]
        else:
            parts = [
                types.Part(
                    function_call=types.FunctionCall(
                        name=name, args=args, id=f"call-{uuid.uuid4().hex[:8]}"
                    )
                )
                for name, args in step
            ]
        yield LlmResponse(content=types.Content(role="model", parts=parts))


class Run:
    """An agent with ``tools`` driven by a :class:`ScriptedModel` in an ``InMemoryRunner``."""

    def __init__(
        self, tools: List[Any], script: List[Any], run_config: Any = None, plugins: Any = None
    ) -> None:
        self.model = ScriptedModel(script)
        self.run_config = run_config
        self.agent = LlmAgent(name="agent", model=self.model, tools=tools)
        self.runner = InMemoryRunner(
            app=App(name="ctrlrun_test", root_agent=self.agent, plugins=list(plugins or []))
        )
        self.session_id: Optional[str] = None
        self.events: List[Any] = []

    async def _send(self, message: types.Content) -> List[Any]:
        if self.session_id is None:
            session = await self.runner.session_service.create_session(
                app_name="ctrlrun_test", user_id="u"
            )
            self.session_id = session.id
        got = []
        async for event in self.runner.run_async(
            user_id="u", session_id=self.session_id, new_message=message, run_config=self.run_config
        ):
            got.append(event)
        self.events.extend(got)
        return got

    def say(self, text: str = "go") -> List[Any]:
        message = types.Content(role="user", parts=[types.Part.from_text(text=text)])
        return asyncio.run(self._send(message))

    def confirmations(self, events: List[Any]) -> List[types.FunctionCall]:
        """The ``adk_request_confirmation`` calls among ``events`` (what ADK asks the user)."""
        return [
            fc for e in events for fc in (e.get_function_calls() or []) if fc.name == CONFIRMATION
        ]

    def confirm(self, calls: List[types.FunctionCall], confirmed: bool = True) -> List[Any]:
        """The user's answer to ADK's confirmation requests ``calls``."""
        parts = [
            types.Part(
                function_response=types.FunctionResponse(
                    name=CONFIRMATION,
                    id=fc.id,
                    response=ToolConfirmation(confirmed=confirmed).model_dump(by_alias=True),
                )
            )
            for fc in calls
        ]
        return asyncio.run(self._send(types.Content(role="user", parts=parts)))
