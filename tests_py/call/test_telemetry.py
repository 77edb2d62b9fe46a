"""OpenTelemetry: one span per protected call (GenAI tool-call conventions), the call counter,
and the key never exported raw unless asked. An in-memory exporter and metric reader from the
OpenTelemetry SDK; both backends, sync and async."""

from __future__ import annotations

import hashlib
import logging
from typing import Any, Dict, List

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ctrlrun import DuplicateEffect, NotExecuted, StoreError

EXPORTER = InMemorySpanExporter()
READER = InMemoryMetricReader()


@pytest.fixture(scope="module", autouse=True)
def providers():
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))
    yield


@pytest.fixture
def spans():
    EXPORTER.clear()

    def finished(action: str) -> List[Any]:
        return [s for s in EXPORTER.get_finished_spans() if s.name == f"execute_tool {action}"]

    return finished


def calls_by_outcome(action: str) -> Dict[str, int]:
    out: Dict[str, int] = {}
    data = READER.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name != "ctrlrun.calls":
                    continue
                for point in metric.data.data_points:
                    if point.attributes.get("gen_ai.tool.name") == action:
                        outcome = str(point.attributes["ctrlrun.outcome"])
                        out[outcome] = out.get(outcome, 0) + point.value
    return out


def test_each_protected_call_is_one_span_with_its_outcome_and_no_raw_key(
    mode, store, spans, caplog, request
):
    action = f"shop.pay.{request.node.callspec.id}"
    caplog.set_level(logging.INFO, logger="ctrlrun")

    @mode.protect(action, effect="pay:{order}", store=store)
    def pay(order: str) -> str:
        if order == "nothing":
            raise NotExecuted("card declined before anything was sent")
        if order == "boom":
            raise TimeoutError("no reply")
        return "paid"

    assert mode.call(pay, "o1") == "paid"
    with pytest.raises(DuplicateEffect):
        mode.call(pay, "o1")
    with pytest.raises(NotExecuted):
        mode.call(pay, "nothing")
    with pytest.raises(TimeoutError):
        mode.call(pay, "boom")

    done, refused, failed, unknown = spans(action)
    assert done.kind is trace.SpanKind.INTERNAL
    attrs = dict(done.attributes)
    assert attrs == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": action,
        "ctrlrun.outcome": "committed",
        "ctrlrun.attempt": 1,
        "ctrlrun.effect_key.sha256": hashlib.sha256(b"pay:o1").hexdigest(),
    }
    assert refused.attributes["ctrlrun.outcome"] == "refused_committed"
    assert refused.attributes["error.type"] == "DuplicateEffect"
    assert "ctrlrun.attempt" not in refused.attributes  # no body ran
    assert failed.attributes["ctrlrun.outcome"] == "failed"
    assert unknown.attributes["ctrlrun.outcome"] == "ambiguous"
    assert unknown.attributes["error.type"] == "TimeoutError"
    for span in (done, refused, failed, unknown):  # the raw key is never exported
        assert not any("pay:" in str(v) for v in span.attributes.values())
    assert calls_by_outcome(action) == {
        "committed": 1,
        "refused_committed": 1,
        "failed": 1,
        "ambiguous": 1,
    }
    refusals = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert refusals == [f"ctrlrun: {action} pay:o1: refused_committed"]


def test_the_raw_key_is_exported_only_when_asked(mode, store, spans, monkeypatch):
    monkeypatch.setenv("CTRLRUN_OTEL_EFFECT_KEY", "raw")

    @mode.protect("shop.raw", effect="raw:{order}", store=store)
    def pay(order: str) -> str:
        return "paid"

    mode.call(pay, "o9")
    (span,) = [s for s in spans("shop.raw") if s.attributes.get("ctrlrun.effect_key") == "raw:o9"]
    assert "ctrlrun.effect_key.sha256" not in span.attributes


def test_each_gateway_call_is_one_span(store, spans, tmp_path, monkeypatch):
    import sys

    import anyio
    from mcp import types
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from ctrlrun.gateway.forward import Gateway, upstream_tools
    from ctrlrun.gateway.upstream import Upstream, WatchedStream
    from tests_py.support.gateway_rig import HERE

    policy = tmp_path / "ctrlrun.yaml"
    policy.write_text(
        "schema: ctrlrun.policy/v2\nactions:\n  mcp.acme.refund:\n"
        '    effect: "refund:{payment_id}"\n'
    )
    monkeypatch.setenv("CTRLRUN_CONFIG", str(policy))
    upstream = StdioServerParameters(
        command=sys.executable,
        args=[str(HERE / "mcp_upstream.py")],
        env={"UPSTREAM_LOG": str(tmp_path / "upstream.log"), "PATH": "/usr/bin:/bin"},
    )

    async def main() -> list:
        async with stdio_client(upstream) as (r, w):
            watched = WatchedStream(r)
            async with ClientSession(watched, w) as session:
                await session.initialize()
                gateway = Gateway(
                    "acme", store, Upstream(session, watched), 30.0, await upstream_tools(session)
                )
                call = types.CallToolRequestParams(
                    name="refund", arguments={"payment_id": "pi_t", "amount": 1}
                )
                return [await gateway.call_tool(None, call) for _ in range(2)]

    first, again = anyio.run(main)
    assert not first.is_error and again.is_error
    done, refused = spans("mcp.acme.refund")
    assert done.attributes["ctrlrun.outcome"] == "committed"
    assert done.attributes["gen_ai.tool.name"] == "mcp.acme.refund"
    assert refused.attributes["ctrlrun.outcome"] == "refused_committed"
    digest = hashlib.sha256(b"refund:pi_t").hexdigest()
    assert done.attributes["ctrlrun.effect_key.sha256"] == digest


def test_a_store_that_cannot_be_opened_is_observed_as_an_error(mode, tmp_path, spans):
    """The call with neither replay nor wait opens its store inside its span, as the others
    do: a store error is a span with its error type and a call counted ``error``."""
    action = f"shop.unopened.{mode.name}"
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")

    @mode.protect(action, effect="pay:{order}", store=str(blocker / "s.db"))
    def pay(order: str) -> str:
        return "paid"

    with pytest.raises(StoreError):
        mode.call(pay, "o1")
    (span,) = spans(action)
    assert span.attributes["ctrlrun.outcome"] == "error"
    assert span.attributes["error.type"] == "StoreError"
    assert calls_by_outcome(action) == {"error": 1}
