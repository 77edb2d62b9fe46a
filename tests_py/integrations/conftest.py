"""Fixtures of the framework integration tests: each case runs against the real framework, its
own test model (no API key), on both backends (``store_url``) and with sync and async tools."""

import importlib.util
import os

# CrewAI sends no telemetry from the tests (set before any test module imports it). Only in
# its own venv: OTEL_SDK_DISABLED would switch off the SDK for every test of the process,
# ctrlrun's telemetry tests included.
if importlib.util.find_spec("crewai") is not None:
    os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

# Strands Agents and CrewAI pin versions of mcp and pydantic the main venv cannot have (it needs
# mcp>=2.3), so their tests run in venvs of their own (.venv-strands, .venv-crewai: `make
# test-frameworks`, from requirements/*.txt). A venv without the framework does not collect
# them; that is no skip: the framework's own venv runs every one of them.
collect_ignore_glob = [
    f"test_{name}*.py"
    for name, module in (("strands", "strands"), ("crewai", "crewai"))
    if importlib.util.find_spec(module) is None
]
