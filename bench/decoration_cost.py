"""What decorating a tool costs at start-up, per integration, with every framework loaded: the
core's "already registered by a framework?" check reads the decorating frames' namespaces (see
ctrlrun/call/seams.py). Run: ``python -m bench.decoration_cost``."""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any, Callable


def per_decoration(deco: Callable[..., Any], store: str, n: int = 20) -> float:
    """Milliseconds per decoration of a fresh function with ``deco``."""
    started = time.perf_counter()
    for _ in range(n):

        @deco("bench.action", effect="a:{x}", store=store)
        def tool(x: str) -> str:
            return x

    return (time.perf_counter() - started) / n * 1000


def main() -> None:
    import ctrlrun
    from ctrlrun.integrations import langchain, mcp, openai_agents, pydantic_ai

    store = os.path.join(tempfile.mkdtemp(), "bench.db")
    for label, deco in (
        ("ctrlrun.protect", ctrlrun.protect),
        ("integrations.pydantic_ai.protect", pydantic_ai.protect),
        ("integrations.mcp.protect", mcp.protect),
        ("integrations.langchain.protect", langchain.protect),
        ("integrations.openai_agents.protect", openai_agents.protect),
    ):
        print(f"{label:38s} {per_decoration(deco, store):7.1f} ms per decoration")


if __name__ == "__main__":
    main()
