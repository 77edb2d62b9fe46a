"""The policy file (``ctrlrun.yaml`` / ``CTRLRUN_CONFIG``): parse errors naming file, line and
field; its integration into ``protect`` (template, precedence, deny, reload); and
``ctrlrun policy check`` as a subprocess."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import warnings
from datetime import timedelta
from pathlib import Path

import pytest

import ctrlrun
from ctrlrun import ActionDenied, EffectKeyError, EffectState, PolicyError, PolicyWarning
from ctrlrun._policy import ActionPolicy, load_policy


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load_error(tmp_path, text: str, name: str = "policy.yaml") -> PolicyError:
    path = write(tmp_path / name, text)
    with pytest.raises(PolicyError) as info:
        load_policy(str(path))
    err = info.value
    assert err.file == str(path)
    assert str(path) in str(err)
    return err


# --------------------------------------------------------------------------------------------
# PolicyError: file, line, field
# --------------------------------------------------------------------------------------------


def test_bad_template_stray_open_brace(tmp_path):
    err = load_error(tmp_path, """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "refund:{payment_id"
            decision: allow
        """)
    assert err.line == 4
    assert err.field == "actions.billing.refund.effect"
    assert f"{err.file}:4" in str(err)
    assert "refund:{payment_id" in str(err) and "{" in str(err)


def test_bad_template_stray_close_brace(tmp_path):
    err = load_error(tmp_path, """\
        schema: ctrlrun.policy/v2
        actions:
          a.one:
            effect: "one:{id}"
          a.two:
            decision: allow
            effect: "two:}{id}"
        """)
    assert err.line == 7
    assert err.field == "actions.a.two.effect"
    assert "}" in str(err)


def test_unknown_top_level_key(tmp_path):
    err = load_error(tmp_path, """\
        schema: ctrlrun.policy/v2
        actions:
          a.b:
            effect: "k:{x}"
        stores:
          default: sqlite:///x.db
        """)
    assert err.line == 5
    assert err.field == "stores"
    assert "unknown" in str(err)


def test_unknown_action_key(tmp_path):
    err = load_error(tmp_path, """\
        schema: ctrlrun.policy/v2
        actions:
          a.b:
            effect: "k:{x}"
            lease: 30
        """)
    assert err.line == 5
    assert err.field == "actions.a.b.lease"
    assert "unknown" in str(err)


def test_wrong_schema_string(tmp_path):
    err = load_error(tmp_path, """\
        # a comment first, so the schema sits on line 2
        schema: ctrlrun.policy/v1
        actions: {}
        """)
    assert err.line == 2
    assert err.field == "schema"
    assert "ctrlrun.policy/v1" in str(err) and "ctrlrun.policy/v2" in str(err)


def test_missing_schema(tmp_path):
    err = load_error(tmp_path, """\
        actions:
          a.b:
            effect: "k:{x}"
        """)
    assert err.field == "schema"
    assert "missing" in str(err)
    assert "ctrlrun.policy/v2" in str(err)


def test_duplicate_action_name_names_both_lines(tmp_path):
    err = load_error(tmp_path, """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "refund:{payment_id}"
          mail.send:
            effect: "mail:{to}"
          billing.refund:
            effect: "refund2:{payment_id}"
        """)
    assert err.line == 7
    assert err.field == "actions.billing.refund"
    msg = str(err)
    assert f"{err.file}:7" in msg
    assert "line 3" in msg
    assert "twice" in msg


def test_duplicate_top_level_key(tmp_path):
    err = load_error(tmp_path, """\
        schema: ctrlrun.policy/v2
        actions: {}
        schema: ctrlrun.policy/v2
        """)
    assert err.line == 3
    assert "schema" in err.field
    assert "line 1" in str(err)


def test_decision_approve_and_its_time_to_live_are_read(tmp_path):
    path = tmp_path / "p.yaml"
    write(path, """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "refund:{payment_id}"
            decision: approve
            approval_ttl: 2h
          billing.quote:
            effect: "quote:{id}"
            decision: approve
            approval_ttl: 90
        """)
    policy = load_policy(str(path))
    refund, quote = policy.actions["billing.refund"], policy.actions["billing.quote"]
    assert (refund.decision, refund.approval_ttl) == ("approve", timedelta(hours=2))
    assert quote.approval_ttl == timedelta(seconds=90)


@pytest.mark.parametrize("entry,field,problem", [
    ('decision: maybe', "decision", "expected allow, approve or deny"),
    ('decision: approve\n    approval_ttl: soon', "approval_ttl", "expected a duration"),
    ('decision: approve\n    approval_ttl: 0s', "approval_ttl", "expected a duration"),
    ('decision: approve\n    approval_ttl: 31d', "approval_ttl", "expected a duration"),
    ('decision: allow\n    approval_ttl: 5m', "approval_ttl", "decision: approve only"),
])
def test_bad_decisions_and_times_to_live_name_the_field(tmp_path, entry, field, problem):
    path = tmp_path / "p.yaml"
    path.write_text(f"schema: ctrlrun.policy/v2\nactions:\n  a.b:\n    {entry}\n")
    with pytest.raises(PolicyError) as info:
        load_policy(str(path))
    assert info.value.field == f"actions.a.b.{field}" and problem in str(info.value)


def test_unknown_decision(tmp_path):
    err = load_error(tmp_path, """\
        schema: ctrlrun.policy/v2
        actions:
          a.b:
            decision: maybe
        """)
    assert err.line == 4
    assert err.field == "actions.a.b.decision"
    assert "maybe" in str(err) and "allow" in str(err) and "deny" in str(err)


def test_decision_that_is_not_a_string(tmp_path):
    err = load_error(tmp_path, """\
        schema: ctrlrun.policy/v2
        actions:
          a.b:
            decision: yes
        """)
    assert err.line == 4
    assert err.field == "actions.a.b.decision"


def test_not_yaml(tmp_path):
    err = load_error(tmp_path, """\
        schema: ctrlrun.policy/v2
        actions:
          a.b: [unclosed
          c.d: "x"
        """)
    assert err.line is not None and 3 <= err.line <= 5
    assert "YAML" in str(err)
    assert f"{err.file}:{err.line}" in str(err)


def test_not_a_mapping(tmp_path):
    err = load_error(tmp_path, "- schema\n- actions\n")
    assert err.line == 1
    assert "mapping" in str(err)


def test_empty_file(tmp_path):
    err = load_error(tmp_path, "")
    assert "empty" in str(err)


def test_not_utf8(tmp_path):
    path = tmp_path / "latin.yaml"
    path.write_bytes(b"schema: ctrlrun.policy/v2\nactions:\n  caf\xe9:\n    decision: allow\n")
    with pytest.raises(PolicyError) as info:
        load_policy(str(path))
    assert info.value.file == str(path)
    assert "UTF-8" in str(info.value)


def test_missing_file(tmp_path):
    path = tmp_path / "absent.yaml"
    with pytest.raises(PolicyError) as info:
        load_policy(str(path))
    assert info.value.file == str(path)
    assert str(path) in str(info.value)


def test_yaml_tags_are_not_executed(tmp_path):
    marker = tmp_path / "pwned"
    err = load_error(tmp_path, f"""\
        schema: ctrlrun.policy/v2
        actions:
          a.b:
            effect: !!python/object/apply:os.system ["touch {marker}"]
        """)
    assert err.line == 4
    assert err.field == "actions.a.b.effect"
    assert not marker.exists()


def test_action_name_must_be_printable(tmp_path):
    err = load_error(tmp_path, 'schema: ctrlrun.policy/v2\nactions:\n  "bad\\tname":\n'
                               '    decision: allow\n')
    assert err.line == 3
    assert err.field.startswith("actions.")


def test_policy_error_is_a_ctrlrun_error():
    assert issubclass(PolicyError, ctrlrun.CTRLRunError)
    assert issubclass(PolicyWarning, UserWarning)


VALID = """\
    schema: ctrlrun.policy/v2
    actions:
      billing.refund:
        effect: "refund:{payment_id}"
        decision: allow
      mail.send:
        effect: "mail:{to}:{template}"
      audit.log:
        decision: allow
      danger.drop:
        decision: deny
    """


def test_valid_policy_parses(tmp_path):
    path = write(tmp_path / "ok.yaml", VALID)
    pol = load_policy(str(path))
    assert pol.path == str(path)
    assert pol.actions == {
        "billing.refund": ActionPolicy("billing.refund", "refund:{payment_id}", "allow", 3,
                                       decided=True),
        "mail.send": ActionPolicy("mail.send", "mail:{to}:{template}", "allow", 6),
        "audit.log": ActionPolicy("audit.log", None, "allow", 8, decided=True),
        "danger.drop": ActionPolicy("danger.drop", None, "deny", 10, decided=True),
    }
    assert [a.name for a in pol.unreserved()] == ["audit.log"]


def test_valid_policy_without_actions(tmp_path):
    assert load_policy(str(write(tmp_path / "a.yaml", "schema: ctrlrun.policy/v2\n"))).actions == {}
    assert load_policy(str(write(tmp_path / "b.yaml",
                                 "schema: ctrlrun.policy/v2\nactions:\n"))).actions == {}


# --------------------------------------------------------------------------------------------
# through protect
# --------------------------------------------------------------------------------------------


@pytest.fixture
def here(tmp_path, monkeypatch):
    """The test's working directory, so ./ctrlrun.yaml is per test."""
    monkeypatch.delenv("CTRLRUN_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_no_effect_takes_the_policy_template(here, store):
    write(here / "ctrlrun.yaml", """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "refund:{payment_id}"
        """)
    calls = []

    @ctrlrun.protect("billing.refund", store=store)
    def refund(payment_id, amount):
        calls.append(payment_id)
        return amount

    assert refund("pi_1", 5) == 5
    assert [r.effect_key for r in store.list_effects()] == ["refund:pi_1"]
    assert store.get_effect("refund:pi_1").state == EffectState.COMMITTED
    # it is a real reservation: the same key is refused now
    with pytest.raises(ctrlrun.DuplicateEffect):
        refund("pi_1", 5)
    assert calls == ["pi_1"]


def test_no_effect_takes_the_policy_template_async(here, store):
    write(here / "ctrlrun.yaml", """\
        schema: ctrlrun.policy/v2
        actions:
          mail.send:
            effect: "mail:{to}"
        """)

    @ctrlrun.protect("mail.send", store=store)
    async def send(to, body="hi"):
        return to

    assert asyncio.run(send("bob@example.com")) == "bob@example.com"
    assert [r.effect_key for r in store.list_effects()] == ["mail:bob@example.com"]


def test_policy_of_another_action_does_not_apply(here, store):
    write(here / "ctrlrun.yaml", """\
        schema: ctrlrun.policy/v2
        actions:
          other.action:
            decision: deny
        """)

    @ctrlrun.protect("billing.refund", store=store)
    def refund(payment_id):
        return "ran"

    assert refund("pi_1") == "ran"  # no template anywhere: runs unreserved
    assert store.list_effects() == []


def test_policy_action_without_template_runs_unreserved(here, store):
    write(here / "ctrlrun.yaml", """\
        schema: ctrlrun.policy/v2
        actions:
          audit.log:
            decision: allow
        """)
    calls = []

    @ctrlrun.protect("audit.log", store=store)
    def log(line):
        calls.append(line)
        return len(calls)

    assert log("a") == 1 and log("a") == 2
    assert store.list_effects() == []


def test_decorator_wins_with_one_warning(here, store):
    write(here / "ctrlrun.yaml", """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "policy-refund:{payment_id}"
        """)

    @ctrlrun.protect("billing.refund", effect="refund:{payment_id}", store=store)
    def refund(payment_id):
        return payment_id

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for pid in ("pi_1", "pi_2", "pi_3", "pi_4"):
            assert refund(pid) == pid
    ours = [w for w in caught if issubclass(w.category, PolicyWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    msg = str(ours[0].message)
    assert "refund:{payment_id}" in msg and "policy-refund:{payment_id}" in msg
    assert "billing.refund" in msg
    assert ours[0].filename == __file__  # points at the caller, not at ctrlrun's internals
    assert sorted(r.effect_key for r in store.list_effects()) == [
        "refund:pi_1", "refund:pi_2", "refund:pi_3", "refund:pi_4"]


def test_warning_is_per_function(here, store):
    write(here / "ctrlrun.yaml", """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "policy:{payment_id}"
        """)

    @ctrlrun.protect("billing.refund", effect="a:{payment_id}", store=store)
    def one(payment_id):
        return 1

    @ctrlrun.protect("billing.refund", effect="b:{payment_id}", store=store)
    def two(payment_id):
        return 2

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        one("x"), one("y"), two("x"), two("y")
    assert len([w for w in caught if issubclass(w.category, PolicyWarning)]) == 2


def test_no_warning_when_templates_agree(here, store):
    write(here / "ctrlrun.yaml", """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "refund:{payment_id}"
        """)

    @ctrlrun.protect("billing.refund", effect="refund:{payment_id}", store=store)
    def refund(payment_id):
        return payment_id

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        refund("pi_1"), refund("pi_2")
    assert not [w for w in caught if issubclass(w.category, PolicyWarning)]


@pytest.mark.parametrize("own_effect", [None, "refund:{payment_id}"])
def test_deny_refuses_before_any_reservation(here, store, own_effect):
    write(here / "ctrlrun.yaml", """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "refund:{payment_id}"
            decision: deny
        """)
    calls = []

    @ctrlrun.protect("billing.refund", effect=own_effect, store=store)
    def refund(payment_id):
        calls.append(payment_id)

    with pytest.raises(ActionDenied) as info:
        refund("pi_1")
    assert calls == []
    assert store.list_effects() == []
    assert info.value.action == "billing.refund"
    assert info.value.policy == str(here / "ctrlrun.yaml")
    assert "billing.refund" in str(info.value)


def test_ctrlrun_config_names_the_file(here, store, tmp_path_factory, monkeypatch):
    # ./ctrlrun.yaml says one thing, CTRLRUN_CONFIG another: the named file is used
    write(here / "ctrlrun.yaml", """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            decision: deny
        """)
    elsewhere = tmp_path_factory.mktemp("config") / "named.yaml"
    write(elsewhere, """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "named:{payment_id}"
        """)
    monkeypatch.setenv("CTRLRUN_CONFIG", str(elsewhere))

    @ctrlrun.protect("billing.refund", store=store)
    def refund(payment_id):
        return payment_id

    assert refund("pi_9") == "pi_9"
    assert [r.effect_key for r in store.list_effects()] == ["named:pi_9"]


def test_ctrlrun_config_missing_file(here, store, monkeypatch):
    missing = here / "nowhere" / "policy.yaml"
    monkeypatch.setenv("CTRLRUN_CONFIG", str(missing))
    calls = []

    @ctrlrun.protect("billing.refund", effect="refund:{payment_id}", store=store)
    def refund(payment_id):
        calls.append(payment_id)

    with pytest.raises(PolicyError) as info:
        refund("pi_1")
    assert info.value.file == str(missing)
    assert "CTRLRUN_CONFIG" in str(info.value)
    assert calls == []
    assert store.list_effects() == []


def test_broken_policy_raises_at_call_and_nothing_runs(here, store):
    write(here / "ctrlrun.yaml", """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "refund:{payment_id}"
            decision: approve-maybe
        """)
    calls = []

    @ctrlrun.protect("billing.refund", store=store)
    def refund(payment_id):
        calls.append(payment_id)

    with pytest.raises(PolicyError) as info:
        refund("pi_1")
    assert info.value.file == str(here / "ctrlrun.yaml")
    assert info.value.line == 5
    assert info.value.field == "actions.billing.refund.decision"
    assert "expected allow, approve or deny" in str(info.value)
    assert calls == [] and store.list_effects() == []


def test_policy_template_naming_no_parameter(here, store):
    write(here / "ctrlrun.yaml", """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "refund:{invoice}"
        """)
    calls = []

    @ctrlrun.protect("billing.refund", store=store)
    def refund(payment_id):
        calls.append(payment_id)

    with pytest.raises(EffectKeyError) as info:
        refund("pi_1")
    assert "invoice" in str(info.value)
    assert calls == [] and store.list_effects() == []


def test_policy_change_on_disk_is_picked_up(here, store):
    policy = here / "ctrlrun.yaml"
    write(policy, """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "a:{payment_id}"
        """)
    calls = []

    @ctrlrun.protect("billing.refund", store=store)
    def refund(payment_id):
        calls.append(payment_id)
        return payment_id

    refund("pi_1")
    assert [r.effect_key for r in store.list_effects()] == ["a:pi_1"]

    # a new template (different content and size): the next call uses it
    write(policy, """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "second-template:{payment_id}"
        """)
    refund("pi_1")
    assert sorted(r.effect_key for r in store.list_effects()) == ["a:pi_1", "second-template:pi_1"]

    # now denied
    write(policy, """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "second-template:{payment_id}"
            decision: deny
        """)
    with pytest.raises(ActionDenied):
        refund("pi_2")
    assert calls == ["pi_1", "pi_1"]

    # now broken
    write(policy, """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "b:{payment_id"
        """)
    with pytest.raises(PolicyError) as info:
        refund("pi_2")
    assert info.value.line == 4

    # and gone: no policy, no template, the call runs unreserved
    policy.unlink()
    assert refund("pi_3") == "pi_3"
    assert calls == ["pi_1", "pi_1", "pi_3"]
    assert len(store.list_effects()) == 2


def test_policy_file_follows_the_working_directory(tmp_path, store, monkeypatch):
    monkeypatch.delenv("CTRLRUN_CONFIG", raising=False)
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    write(one / "ctrlrun.yaml", """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "one:{payment_id}"
        """)
    write(two / "ctrlrun.yaml", """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            decision: deny
        """)

    @ctrlrun.protect("billing.refund", store=store)
    def refund(payment_id):
        return payment_id

    monkeypatch.chdir(one)
    refund("pi_1")
    monkeypatch.chdir(two)
    with pytest.raises(ActionDenied):
        refund("pi_2")
    assert [r.effect_key for r in store.list_effects()] == ["one:pi_1"]


# --------------------------------------------------------------------------------------------
# ctrlrun policy check
# --------------------------------------------------------------------------------------------


def run_cli(*args, cwd, env=None):
    return subprocess.run(
        [sys.executable, "-m", "ctrlrun", *args], capture_output=True, text=True, timeout=120,
        cwd=cwd, env=env if env is not None else dict(os.environ),
    )


def test_policy_check_lists_unreserved_actions(here):
    path = write(here / "mine.yaml", """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "refund:{payment_id}"
          audit.log:
            decision: allow
          mail.send:
            effect: "mail:{to}"
          crm.update:
            decision: allow
        """)
    proc = run_cli("policy", "check", str(path), cwd=here)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    out = proc.stdout
    assert "valid" in out and "4 action(s)" in out
    unreserved = [ln for ln in out.splitlines() if "unreserved" in ln]
    assert len(unreserved) == 2
    assert "audit.log" in unreserved[0] and "line 5" in unreserved[0]
    assert "crm.update" in unreserved[1] and "line 9" in unreserved[1]
    assert "billing.refund" not in out and "mail.send" not in out


def test_policy_check_all_templated(here):
    path = write(here / "mine.yaml", """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "refund:{payment_id}"
        """)
    proc = run_cli("policy", "check", str(path), cwd=here)
    assert proc.returncode == 0, proc.stderr
    assert "unreserved:" not in proc.stdout
    assert "every allowed action has an effect template" in proc.stdout


def test_policy_check_default_file_and_ctrlrun_config(here):
    write(here / "ctrlrun.yaml", """\
        schema: ctrlrun.policy/v2
        actions:
          from.cwd:
            decision: allow
        """)
    env = {k: v for k, v in os.environ.items() if k != "CTRLRUN_CONFIG"}
    proc = run_cli("policy", "check", cwd=here, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "from.cwd" in proc.stdout

    named = write(here / "named.yaml", """\
        schema: ctrlrun.policy/v2
        actions:
          from.env:
            decision: allow
        """)
    proc = run_cli("policy", "check", cwd=here, env=dict(env, CTRLRUN_CONFIG=str(named)))
    assert proc.returncode == 0, proc.stderr
    assert "from.env" in proc.stdout and "from.cwd" not in proc.stdout


@pytest.mark.parametrize("text,line,field", [
    ("schema: ctrlrun.policy/v2\nactions:\n  a.b:\n    effect: \"k:{x\"\n", 4, "actions.a.b.effect"),
    ("schema: ctrlrun.policy/v3\n", 1, "schema"),
    ("schema: ctrlrun.policy/v2\nactions:\n  a.b:\n    decision: approves\n", 4,
     "actions.a.b.decision"),
    ("schema: ctrlrun.policy/v2\nactions:\n  a.b: {}\n  a.b: {}\n", 4, "actions.a.b"),
    ("schema: ctrlrun.policy/v2\nextra: 1\n", 2, "extra"),
])
def test_policy_check_bad_file_exit_2(here, text, line, field):
    path = here / "bad.yaml"
    path.write_text(text)
    proc = run_cli("policy", "check", str(path), cwd=here)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert f"{path}:{line}" in lines[0]
    assert field in lines[0]


def test_policy_check_missing_file_exit_2(here):
    proc = run_cli("policy", "check", str(here / "absent.yaml"), cwd=here)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len([ln for ln in proc.stderr.splitlines() if ln.strip()]) == 1
    assert "absent.yaml" in proc.stderr
