"""The policy file (``ctrlrun.yaml`` / ``CTRLRUN_CONFIG``): parse errors naming file, line and
field, and the valid forms. Through ``protect``: test_policy_protect.py; ``ctrlrun policy check``:
test_policy_check.py."""

from __future__ import annotations

from datetime import timedelta

import pytest

import ctrlrun
from ctrlrun import PolicyError, PolicyWarning
from ctrlrun.policy import ActionPolicy, load_policy
from tests_py.support.policy_files import write


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
    err = load_error(
        tmp_path,
        """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "refund:{payment_id"
            decision: allow
        """,
    )
    assert err.line == 4
    assert err.field == "actions.billing.refund.effect"
    assert f"{err.file}:4" in str(err)
    assert "refund:{payment_id" in str(err) and "{" in str(err)


def test_bad_template_stray_close_brace(tmp_path):
    err = load_error(
        tmp_path,
        """\
        schema: ctrlrun.policy/v2
        actions:
          a.one:
            effect: "one:{id}"
          a.two:
            decision: allow
            effect: "two:}{id}"
        """,
    )
    assert err.line == 7
    assert err.field == "actions.a.two.effect"
    assert "}" in str(err)


def test_unknown_top_level_key(tmp_path):
    err = load_error(
        tmp_path,
        """\
        schema: ctrlrun.policy/v2
        actions:
          a.b:
            effect: "k:{x}"
        stores:
          default: sqlite:///x.db
        """,
    )
    assert err.line == 5
    assert err.field == "stores"
    assert "unknown" in str(err)


def test_unknown_action_key(tmp_path):
    err = load_error(
        tmp_path,
        """\
        schema: ctrlrun.policy/v2
        actions:
          a.b:
            effect: "k:{x}"
            lease: 30
        """,
    )
    assert err.line == 5
    assert err.field == "actions.a.b.lease"
    assert "unknown" in str(err)


def test_wrong_schema_string(tmp_path):
    err = load_error(
        tmp_path,
        """\
        # a comment first, so the schema sits on line 2
        schema: ctrlrun.policy/v1
        actions: {}
        """,
    )
    assert err.line == 2
    assert err.field == "schema"
    assert "ctrlrun.policy/v1" in str(err) and "ctrlrun.policy/v2" in str(err)


def test_missing_schema(tmp_path):
    err = load_error(
        tmp_path,
        """\
        actions:
          a.b:
            effect: "k:{x}"
        """,
    )
    assert err.field == "schema"
    assert "missing" in str(err)
    assert "ctrlrun.policy/v2" in str(err)


def test_duplicate_action_name_names_both_lines(tmp_path):
    err = load_error(
        tmp_path,
        """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "refund:{payment_id}"
          mail.send:
            effect: "mail:{to}"
          billing.refund:
            effect: "refund2:{payment_id}"
        """,
    )
    assert err.line == 7
    assert err.field == "actions.billing.refund"
    msg = str(err)
    assert f"{err.file}:7" in msg
    assert "line 3" in msg
    assert "twice" in msg


def test_duplicate_top_level_key(tmp_path):
    err = load_error(
        tmp_path,
        """\
        schema: ctrlrun.policy/v2
        actions: {}
        schema: ctrlrun.policy/v2
        """,
    )
    assert err.line == 3
    assert "schema" in err.field
    assert "line 1" in str(err)


def test_decision_approve_and_its_time_to_live_are_read(tmp_path):
    path = tmp_path / "p.yaml"
    write(
        path,
        """\
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
        """,
    )
    policy = load_policy(str(path))
    refund, quote = policy.actions["billing.refund"], policy.actions["billing.quote"]
    assert (refund.decision, refund.approval_ttl) == ("approve", timedelta(hours=2))
    assert quote.approval_ttl == timedelta(seconds=90)


@pytest.mark.parametrize(
    "entry,field,problem",
    [
        ("decision: maybe", "decision", "expected allow, approve or deny"),
        ("decision: approve\n    approval_ttl: soon", "approval_ttl", "expected a duration"),
        ("decision: approve\n    approval_ttl: 0s", "approval_ttl", "expected a duration"),
        ("decision: approve\n    approval_ttl: 31d", "approval_ttl", "expected a duration"),
        ("decision: allow\n    approval_ttl: 5m", "approval_ttl", "decision: approve only"),
    ],
)
def test_bad_decisions_and_times_to_live_name_the_field(tmp_path, entry, field, problem):
    path = tmp_path / "p.yaml"
    path.write_text(f"schema: ctrlrun.policy/v2\nactions:\n  a.b:\n    {entry}\n")
    with pytest.raises(PolicyError) as info:
        load_policy(str(path))
    assert info.value.field == f"actions.a.b.{field}" and problem in str(info.value)


def test_unknown_decision(tmp_path):
    err = load_error(
        tmp_path,
        """\
        schema: ctrlrun.policy/v2
        actions:
          a.b:
            decision: maybe
        """,
    )
    assert err.line == 4
    assert err.field == "actions.a.b.decision"
    assert "maybe" in str(err) and "allow" in str(err) and "deny" in str(err)


def test_decision_that_is_not_a_string(tmp_path):
    err = load_error(
        tmp_path,
        """\
        schema: ctrlrun.policy/v2
        actions:
          a.b:
            decision: yes
        """,
    )
    assert err.line == 4
    assert err.field == "actions.a.b.decision"


def test_not_yaml(tmp_path):
    err = load_error(
        tmp_path,
        """\
        schema: ctrlrun.policy/v2
        actions:
          a.b: [unclosed
          c.d: "x"
        """,
    )
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
    err = load_error(
        tmp_path,
        f"""\
        schema: ctrlrun.policy/v2
        actions:
          a.b:
            effect: !!python/object/apply:os.system ["touch {marker}"]
        """,
    )
    assert err.line == 4
    assert err.field == "actions.a.b.effect"
    assert not marker.exists()


def test_action_name_must_be_printable(tmp_path):
    err = load_error(
        tmp_path, 'schema: ctrlrun.policy/v2\nactions:\n  "bad\\tname":\n    decision: allow\n'
    )
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
        "billing.refund": ActionPolicy(
            "billing.refund", "refund:{payment_id}", "allow", 3, decided=True
        ),
        "mail.send": ActionPolicy("mail.send", "mail:{to}:{template}", "allow", 6),
        "audit.log": ActionPolicy("audit.log", None, "allow", 8, decided=True),
        "danger.drop": ActionPolicy("danger.drop", None, "deny", 10, decided=True),
    }
    assert [a.name for a in pol.unreserved()] == ["audit.log"]


def test_valid_policy_without_actions(tmp_path):
    assert load_policy(str(write(tmp_path / "a.yaml", "schema: ctrlrun.policy/v2\n"))).actions == {}
    assert (
        load_policy(
            str(write(tmp_path / "b.yaml", "schema: ctrlrun.policy/v2\nactions:\n"))
        ).actions
        == {}
    )
