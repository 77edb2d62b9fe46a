"""ctrlrun inside the agent frameworks: one module per framework, each importing it only when
used and installed with the extra of the same name (``pip install 'ctrlrun[langchain]'``).

* :mod:`ctrlrun.integrations.langchain`: LangChain tools and LangGraph graphs;
* :mod:`ctrlrun.integrations.openai_agents`: the OpenAI Agents SDK;
* :mod:`ctrlrun.integrations.pydantic_ai`: pydantic-ai agents;
* :mod:`ctrlrun.integrations.mcp`: MCP servers built on the MCP SDK's ``MCPServer``;
* :mod:`ctrlrun.integrations.agent_framework`: the Microsoft Agent Framework;
* :mod:`ctrlrun.integrations.smolagents`: smolagents tools;
* :mod:`ctrlrun.integrations.google_adk`: Google ADK agents;
* :mod:`ctrlrun.integrations.claude_agent_sdk`: the Claude Agent SDK's in-process ``@tool`` tools;
* :mod:`ctrlrun.integrations.strands`: Strands Agents;
* :mod:`ctrlrun.integrations.crewai`: CrewAI tools;
* :mod:`ctrlrun.integrations.llama_index`: LlamaIndex agents and workflows.

Each has a ``protect`` with the keyword arguments of :func:`ctrlrun.protect` that works in
either order with the framework's tool decorator (or refuses the wrong one at decoration),
answers a refusal as a tool result the model can act on (the gateway's wording), and maps an
approval onto the framework's human-in-the-loop. Parameters a framework injects (run
contexts, tool-call ids) are never part of a call's key or fingerprint: the core recognises
them by type (:mod:`ctrlrun.call.injected`). See docs/integrations/."""
