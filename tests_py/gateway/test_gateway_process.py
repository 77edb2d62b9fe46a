"""The gateway as a process: its startup line, the policy it pins and refuses, two gateways racing,
its command line's errors, the MCP SDK as an extra, and SIGTERM. A real MCP client talks to
``ctrlrun gateway`` in its own process in front of a real upstream (tests_py/support/mcp_upstream.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap

import anyio
import pytest
from mcp.client.session import ClientSession

from tests_py.support.cli import run_cli
from tests_py.support.gateway_rig import POLICY, Rig, ctrl, gateway_command, listening_gateway
from tests_py.support.sqlite_lock import locked


def test_the_startup_line_names_unreserved_writes_and_tools_say_they_are_reserved(rig, store):
    async def body(s):
        return await s.list_tools(), await s.call_tool("nosuch", {"x": 1})

    listed, unknown = rig.session(body)
    line = rig.stderr.read_text().splitlines()[0]
    assert line.startswith("ctrlrun gateway acme: ") and "(9 tools)" in line, line
    assert line.endswith("writes with no effect template, run unreserved: lookup"), line
    described = {t.name: t.description for t in listed.tools}
    assert "[ctrlrun] Runs at most once per effect key 'refund:{payment_id}'" in described["refund"]
    assert described["lookup"] == "Read a payment."
    # a tool the policy does not know is forwarded as it is (the upstream answers)
    assert unknown.is_error and unknown.content[0].text == "unknown tool nosuch"
    assert store.list_effects() == []


def test_a_policy_entry_for_a_tool_the_upstream_lacks_reserves_nothing(tmp_path, store_url, store):
    rig = Rig(tmp_path, store_url, POLICY + '  mcp.acme.ghost:\n    effect: "ghost:{id}"\n')
    (r,) = rig.calls(("ghost", {"id": "1"}))
    assert ctrl(r)["refused"] == "invalid" and "no tool 'ghost'" in r.content[0].text
    assert store.list_effects() == []


def test_the_policy_in_force_at_start_is_pinned(rig, store):
    async def body(s):
        first = await s.call_tool("refund", {"payment_id": "pi_p", "amount": 1})
        rig.policy.unlink()  # deleted while the gateway runs
        return first, await s.call_tool("refund", {"payment_id": "pi_q", "amount": 1})

    first, after = rig.session(body)
    assert not first.is_error
    assert ctrl(after)["refused"] == "policy" and "does not exist" in after.content[0].text
    assert len(rig.runs()) == 1


def test_two_gateways_racing_one_call_run_it_once(tmp_path, store_url, store):
    import threading

    rig = Rig(tmp_path, store_url, POLICY)
    results: list = []

    def one() -> None:
        results.extend(rig.calls(("slow", {"payment_id": "race", "seconds": 0.5})))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 2 and len(rig.runs()) == 1, (results, rig.runs())
    refused = [r for r in results if r.is_error]
    assert len(refused) == 1
    assert ctrl(refused[0])["refused"] in ("committed", "in_progress")
    assert store.get_effect("slow:race").state.value == "committed"


@pytest.mark.parametrize(
    "policy,needle",
    [
        (
            "schema: ctrlrun.policy/v2\nactions:\n  mcp.acme.refund:\n    effect: 7\n",
            "effect: must be a string",
        ),
        (
            "schema: ctrlrun.policy/v2\nactions:\n  mcp.acme.refund:\n    on_tool_error: maybe\n",
            "expected ambiguous or failed",
        ),
    ],
)
def test_a_malformed_policy_stops_the_gateway_before_it_serves(policy, needle, tmp_path, store_url):
    (tmp_path / "p.yaml").write_text(policy)
    argv, env = gateway_command(
        tmp_path, "--policy", str(tmp_path / "p.yaml"), "--store", store_url
    )
    p = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_an_upstream_command_that_does_not_exist_is_one_line(tmp_path, store_url):
    argv, env = gateway_command(
        tmp_path, "--store", store_url, upstream=["--", str(tmp_path / "no-such-server")]
    )
    p = subprocess.run(
        argv,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        cwd=str(tmp_path),
    )
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "cannot start or reach the upstream" in p.stderr and "Traceback" not in p.stderr, (
        p.stderr
    )


def test_import_ctrlrun_does_not_import_the_mcp_sdk():
    code = "import sys, ctrlrun, ctrlrun.cli; assert 'mcp' not in sys.modules, 'mcp imported'"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--name", "a.b", "--", "true"], "an alias is 1 to 64"),
        (["--name", "acme"], "name the upstream once"),
        (
            ["--name", "acme", "--upstream-url", "http://x/mcp", "--", "true"],
            "name the upstream once",
        ),
        (["--name", "acme", "--upstream-url", "ftp://x"], "expected an http://"),
        (["--name", "acme", "--upstream-url", "ftp://bob:s3cret@x"], "ftp://***@x"),
        (["--name", "acme", "--listen", "nohost", "--", "true"], "expected HOST:PORT"),
        (["--name", "acme", "--listen", "0.0.0.0:8765", "--", "true"], "loopback address only"),
        (["--name", "acme", "--policy", "/nonexistent.yaml", "--", "true"], "no such file"),
    ],
)
def test_bad_gateway_arguments_are_one_line_errors(args, needle, tmp_path):
    p = run_cli("gateway", *args, cwd=str(tmp_path))
    assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert "s3cret" not in p.stderr


def test_without_the_sdk_the_gateway_names_the_extra(tmp_path):
    code = textwrap.dedent("""
        import sys
        sys.modules['mcp'] = None  # as if the extra were not installed
        from ctrlrun.cli import main
        sys.argv = ['ctrlrun', 'gateway', '--name', 'acme', '--', 'true']
        main()
    """)
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=str(tmp_path)
    )
    assert p.returncode == 2, p.stderr
    assert "pip install 'ctrlrun[gateway]'" in p.stderr and "Traceback" not in p.stderr


def test_a_sent_call_whose_outcome_cannot_be_recorded_is_never_called_unsent(tmp_path):
    """The call goes out and gets no answer in time; recording it ambiguous fails too (the
    store stays locked past every try): the agent is told the call was sent and its outcome
    is unknown, never that nothing was sent. SQLite, whose lock another process can hold."""
    path = tmp_path / "s.db"
    rig = Rig(tmp_path, f"sqlite:///{path}?busy_timeout=0.2", POLICY)  # slow: 1 s timeout
    holders = []

    async def body(s):
        async def hold() -> None:
            await anyio.sleep(0.5)  # reserved and sent by now; the answer never comes in time
            holders.append(await anyio.to_thread.run_sync(locked, str(path), 6.0))

        async with anyio.create_task_group() as tg:
            tg.start_soon(hold)
            return await s.call_tool("slow", {"payment_id": "pi_x", "seconds": 4})

    result = rig.session(body)
    assert holders[0].wait(30) == 0
    text = result.content[0].text
    assert ctrl(result)["refused"] == "store", result
    assert "was sent to the upstream and no answer came" in text, text
    assert "nothing was sent" not in text, text
    assert [r[0] for r in rig.runs()] == ["slow"]


def _gateway_pid(policy) -> int:
    """The process of the gateway started with ``policy`` (found by its command line)."""
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, ValueError):
            continue
        if b"gateway" in argv and str(policy).encode() in argv:
            return int(entry)
    raise AssertionError("no gateway process")


async def _slow_call_in_flight(s, tg, payment_id: str, log) -> None:
    """Start a minute-long reserved call in ``tg``; return once the upstream has started it
    (its execution log exists)."""

    async def call() -> None:
        with contextlib.suppress(Exception):  # the gateway goes away under it
            await s.call_tool("slow", {"payment_id": payment_id, "seconds": 60})

    tg.start_soon(call)
    with anyio.fail_after(30):
        while not log.exists():
            await anyio.sleep(0.05)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the gateway in /proc")
def test_sigterm_ends_the_gateway_and_the_call_in_flight_is_recorded_ambiguous(
    tmp_path, store_url, store
):
    """How an agent host stops an MCP server on stdio: the call in flight is cancelled and
    recorded ambiguous, as on Ctrl-C, not left executing until its lease lapses."""
    rig = Rig(tmp_path, store_url, POLICY.replace("call_timeout: 1s", "call_timeout: 60s"))

    async def body(s) -> None:
        async with anyio.create_task_group() as tg:
            await _slow_call_in_flight(s, tg, "pi_t", rig.log)
            with anyio.fail_after(30):
                os.kill(_gateway_pid(rig.policy), signal.SIGTERM)
                while store.get_effect("slow:pi_t").state.value == "executing":
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()

    with contextlib.suppress(Exception):  # the gateway is gone: the client's end may raise
        rig.session(body)
    assert store.get_effect("slow:pi_t").state.value == "ambiguous"


def test_sigterm_ends_a_gateway_serving_over_http_cleanly(tmp_path, store_url, store):
    from mcp.client.streamable_http import streamable_http_client

    gateway, port = listening_gateway(
        tmp_path, store_url, POLICY.replace("call_timeout: 1s", "call_timeout: 60s")
    )

    async def main() -> None:
        async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                async with anyio.create_task_group() as tg:
                    await _slow_call_in_flight(s, tg, "pi_h", tmp_path / "upstream.log")
                    gateway.send_signal(signal.SIGTERM)
                    code = await anyio.to_thread.run_sync(gateway.wait, 30)
                    tg.cancel_scope.cancel()
        assert code == 0, code  # an interrupt, not a traceback and exit 1

    try:
        anyio.run(main)
    finally:
        gateway.kill()
        gateway.wait()
    assert store.get_effect("slow:pi_h").state.value == "ambiguous"


def test_no_secret_of_an_upstream_url_is_shown():
    from ctrlrun.gateway.upstream import redacted

    assert (
        redacted("cannot reach http://alice:s3cret@h:8/mcp?token=t0k&x=1#top now")
        == "cannot reach http://***@h:8/mcp?***#top now"
    )
    assert redacted("https://h/mcp") == "https://h/mcp"
