"""The policy's notification keys: console_url, notify, escalate_after, and per action
approvals, notify and escalate_after. Every refusal names the file, the line and the field,
and never shows a webhook URL past scheme://host."""

from __future__ import annotations

import textwrap
from datetime import timedelta

import pytest

from ctrlrun import PolicyError
from ctrlrun.policy import load_policy
from tests_py.notify.conftest import SECRET, policy

HEAD = "schema: ctrlrun.policy/v2\n"


def load(here, text: str):
    return load_policy(str(policy(here, HEAD + textwrap.dedent(text))))


def refused(here, text: str) -> PolicyError:
    path = policy(here, HEAD + textwrap.dedent(text))
    with pytest.raises(PolicyError) as info:
        load_policy(str(path))
    err = info.value
    assert err.file == str(path) and str(err).startswith(f"{path}:{err.line}: {err.field}: ")
    return err


def test_every_key_parses(here, monkeypatch):
    monkeypatch.setenv("SLACK_URL", "https://hooks.slack.com/services/T0/B0/xyz")
    p = load(
        here,
        """\
        console_url: https://ctrlrun.example.com:8780/
        escalate_after: 30m
        notify:
          - {url_env: SLACK_URL, format: slack}
          - url: https://hooks.example.com/ctrlrun
            format: json
            secret_env: NOTIFY_TEST_SECRET
        actions:
          stripe.refund:
            effect: "refund:{payment_id}"
            decision: approve
            approval_ttl: 2h
            approvals: 2
            escalate_after: 10m
            notify:
              - {url: "http://127.0.0.1:9/only-this", format: slack}
          crm.note:
            effect: "note:{id}"
            notify: []
          crm.other:
            effect: "other:{id}"
        """,
    )
    assert p.console_url == "https://ctrlrun.example.com:8780" and p.notifies
    assert p.escalate_after == timedelta(minutes=30)
    slack, signed = p.notify
    assert (slack.format, slack.url, slack.url_env) == ("slack", None, "SLACK_URL")
    assert (signed.format, signed.secret_env) == ("json", "NOTIFY_TEST_SECRET")
    assert signed.where.endswith(":6: notify[1]")
    refund = p.actions["stripe.refund"]
    assert (refund.approvals, refund.escalate_after) == (2, timedelta(minutes=10))
    assert [t.url for t in p.targets("stripe.refund")] == ["http://127.0.0.1:9/only-this"]
    assert p.targets("crm.note") == () and p.targets("crm.other") == p.notify
    assert p.targets(None) == p.notify and p.targets("not.listed") == p.notify
    assert p.escalation("stripe.refund") == timedelta(minutes=10)
    assert p.escalation("crm.other") == timedelta(minutes=30)
    assert p.actions["crm.other"].approvals is None and p.actions["crm.other"].notify is None


def test_no_notify_means_nothing_to_check(here):
    p = load(here, "actions:\n  a.b:\n    effect: 'x:{id}'\n    decision: approve\n")
    assert not p.notifies and p.notify == () and p.console_url is None
    assert p.actions["a.b"].approvals is None


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]", "127.0.0.2"])
def test_http_is_accepted_to_loopback(here, host):
    p = load(here, f"notify:\n  - {{url: 'http://{host}:8080/h', format: slack}}\n")
    assert p.notifies


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://hooks.example.com/T0/secretpath", "http:// to a host that is not loopback"),
        ("https://user:pw@hooks.example.com/secretpath", "must not carry a user name or password"),
        ("https://user@hooks.example.com/secretpath", "must not carry a user name or password"),
        ("ftp://hooks.example.com/secretpath", "must be an https:// URL with a host"),
        ("https:///secretpath", "must be an https:// URL with a host"),
        ("https://hooks.example.com/secretpath#frag", "must not have a #fragment"),
        ("https://hooks.example.com:99999/secretpath", "malformed"),
        ("https://hooks.example.com/a secretpath", "without spaces"),
    ],
)
def test_a_url_that_is_not_safe_is_refused_without_showing_it(here, url, problem):
    err = refused(here, f"\nnotify:\n  - format: slack\n    url: '{url}'\n")
    assert (err.line, err.field) == (5, "notify[0].url")
    assert problem in str(err)
    assert "secretpath" not in str(err) and "pw" not in str(err)


@pytest.mark.parametrize(
    ("entry", "line", "field", "problem"),
    [
        ("{url: 'https://h.example/x', format: json}", 3, "notify[0].secret_env", "missing"),
        (
            "{url: 'https://h.example/x', format: slack, secret_env: NOTIFY_TEST_SECRET}",
            3,
            "notify[0].secret_env",
            "applies to format: json only",
        ),
        (
            "{url: 'https://h.example/x', format: teams}",
            3,
            "notify[0].format",
            "expected slack or json",
        ),
        ("{url: 'https://h.example/x'}", 3, "notify[0].format", "missing"),
        ("{url: 'https://h.example/x', url_env: X, format: slack}", 3, "notify[0]", "exactly one"),
        ("{format: slack}", 3, "notify[0]", "exactly one of url and url_env"),
        (
            "{url: 'https://h.example/x', format: slack, retries: 3}",
            3,
            "notify[0].retries",
            "unknown key",
        ),
        (
            "{url_env: 'not a name', format: slack}",
            3,
            "notify[0].url_env",
            "environment variable name",
        ),
        ("{url_env: NOTIFY_UNSET_URL, format: slack}", 3, "notify[0].url_env", "is not set"),
        (
            "{url: 'https://h.example/x', format: json, secret_env: NOTIFY_UNSET_SECRET}",
            3,
            "notify[0].secret_env",
            "is not set",
        ),
        (
            "{url: 'https://h.example/x', format: json, secret_env: NOTIFY_SHORT}",
            3,
            "notify[0].secret_env",
            "shorter than 32 bytes; set NOTIFY_SHORT to at least 32 random bytes",
        ),
        ("'https://h.example/x'", 3, "notify[0]", "must be a mapping"),
    ],
)
def test_a_target_that_is_wrong_is_refused(here, monkeypatch, entry, line, field, problem):
    monkeypatch.delenv("NOTIFY_UNSET_URL", raising=False)
    monkeypatch.delenv("NOTIFY_UNSET_SECRET", raising=False)
    monkeypatch.setenv("NOTIFY_SHORT", "short")
    err = refused(here, f"notify:\n  - {entry}\n")
    assert (err.line, err.field) == (line, field), str(err)
    assert problem in str(err)
    assert "short" not in str(err).split(":", 1)[1].replace("shorter", "")  # no secret value


def test_a_url_in_the_environment_is_checked_and_never_shown(here, monkeypatch):
    monkeypatch.setenv("NOTIFY_URL", "http://hooks.example.com/services/T0/B0/secretpath")
    err = refused(here, "notify:\n  - {url_env: NOTIFY_URL, format: slack}\n")
    assert (err.line, err.field) == (3, "notify[0].url_env")
    assert "the URL in NOTIFY_URL (http://hooks.example.com) uses http://" in str(err)
    assert "secretpath" not in str(err)


def test_notify_must_be_a_short_list(here):
    err = refused(here, "notify: {url: 'https://h.example/x', format: slack}\n")
    assert (err.line, err.field) == (2, "notify") and "must be a list" in str(err)
    many = "".join("  - {url: 'https://h.example/x', format: slack}\n" for _ in range(11))
    err = refused(here, "notify:\n" + many)
    assert err.field == "notify" and "at most 10" in str(err)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("http://console.example.com:8780", "not loopback"),
        ("https://me:pw@console.example.com", "user name or password"),
        ("https://console.example.com/?a=1", "must not have a ?query"),
        ("8780", "https:// URL with a host"),
    ],
)
def test_console_url_is_checked(here, value, problem):
    err = refused(here, f"console_url: '{value}'\n")
    assert (err.line, err.field) == (2, "console_url") and problem in str(err)


def test_console_url_may_have_a_path(here):
    assert load(here, "console_url: https://ops.example.com/ctrlrun/\n").console_url == (
        "https://ops.example.com/ctrlrun"
    )


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("0", "from 1 to 10"),
        ("11", "from 1 to 10"),
        ("two", "whole number"),
        ("true", "whole number"),
        ("1.5", "whole number"),
    ],
)
def test_approvals_is_a_number_from_1_to_10(here, value, problem):
    err = refused(
        here,
        f"actions:\n  a.b:\n    effect: 'x:{{id}}'\n    decision: approve\n    approvals: {value}\n",
    )
    assert (err.line, err.field) == (6, "actions.a.b.approvals") and problem in str(err)


@pytest.mark.parametrize("key", ["approvals: 2", "escalate_after: 5m", "approval_ttl: 5m"])
def test_approve_only_keys_need_decision_approve(here, key):
    err = refused(here, f"actions:\n  a.b:\n    effect: 'x:{{id}}'\n    {key}\n")
    assert err.line == 5 and err.field == "actions.a.b." + key.split(":")[0]
    assert "applies to decision: approve only" in str(err)


def test_escalation_after_the_expiry_is_refused(here):
    err = refused(
        here,
        "actions:\n  a.b:\n    effect: 'x:{id}'\n    decision: approve\n"
        "    approval_ttl: 10m\n    escalate_after: 10m\n",
    )
    assert (err.line, err.field) == (7, "actions.a.b.escalate_after")
    assert "would expire before it escalates" in str(err)


def test_a_bad_global_escalation_and_unknown_keys(here):
    err = refused(here, "escalate_after: soon\n")
    assert (err.line, err.field) == (2, "escalate_after") and "a duration" in str(err)
    err = refused(here, "notifications: []\n")
    assert err.field == "notifications"
    assert "expected schema, actions, console_url, notify and escalate_after" in str(err)
    err = refused(here, "actions:\n  a.b:\n    notfy: []\n")
    assert err.field == "actions.a.b.notfy" and "approvals" in str(err) and "notify" in str(err)
    err = refused(here, "actions:\n  a.b:\n    notify: {}\n")
    assert (err.line, err.field) == (4, "actions.a.b.notify") and "must be a list" in str(err)


def test_the_secret_itself_is_read_from_the_environment(here, monkeypatch):
    monkeypatch.setenv("NOTIFY_TEST_SECRET", SECRET)
    p = load(
        here,
        "notify:\n  - {url: 'https://h.example/x', format: json, secret_env: NOTIFY_TEST_SECRET}\n",
    )
    assert SECRET not in repr(p)


@pytest.mark.parametrize(
    ("value", "accepted"),
    [("x" * 31, False), ("x" * 32, True), ("é" * 15 + "x", False), ("é" * 16, True)],
)
def test_a_secret_needs_32_bytes(here, monkeypatch, value, accepted):
    monkeypatch.setenv("NOTIFY_KEY", value)
    text = "notify:\n  - {url: 'https://h.example/x', format: json, secret_env: NOTIFY_KEY}\n"
    if accepted:
        assert load(here, text).notify[0].secret_env == "NOTIFY_KEY"
        return
    err = refused(here, text)
    assert (err.line, err.field) == (3, "notify[0].secret_env")
    assert "the secret in NOTIFY_KEY is shorter than 32 bytes" in str(err)
    assert "openssl rand -hex 32" in str(err) and value not in str(err)
