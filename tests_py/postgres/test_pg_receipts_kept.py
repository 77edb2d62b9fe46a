"""Schema version 12: the hot writes (the reservation, the outcome) append their receipt in their
own statement instead of through the trigger, and say so in the row (``receipt_kept``); every
other write, a statement of an older process included, still gets its receipt from the trigger.
Each write leaves exactly one receipt, and every chain verifies."""

from __future__ import annotations

import pytest

import ctrlrun
from ctrlrun import EffectState

ACT = "act_" + "a" * 32


@pytest.fixture(params=["unnamed", "prepared"])
def store(request, pg, pg_schema):
    url = pg.url(pg_schema) + ("&prepared_statements=on" if request.param == "prepared" else "")
    s = ctrlrun.open_store(url)
    yield s
    s.close()


def kept(pg, schema: str, key: str) -> str:
    return pg.psql(
        f'SELECT receipt_seq, receipt_kept FROM "{schema}".ctrlrun_effects '
        f"WHERE effect_key = '{key}'"
    )


def test_each_hot_write_appends_its_own_receipt_once(store, pg, pg_schema):
    @ctrlrun.protect("mail.send", effect="mail:{n}", store=store)
    def send(n: int) -> int:
        return n

    assert send(1) == 1
    receipts = store.list_receipts("mail:1")
    assert [(r.seq, r.kind, r.state) for r in receipts] == [
        (1, "reservation", "executing"),
        (2, "outcome", "committed"),
    ]
    assert kept(pg, pg_schema, "mail:1") == "2|2"
    assert store.verify_receipts().ok


def test_a_write_through_the_trigger_after_a_hot_one_gets_its_receipt(store, pg, pg_schema):
    # a lapse to ambiguous is a hot write; the person's resolution is not (ctrlrun_resolve)
    store.reserve_effect("wire:1", ACT, 60)
    store.mark_ambiguous("wire:1", ACT, "timeout")
    assert kept(pg, pg_schema, "wire:1") == "2|2"
    store.resolve_effect("wire:1", "failed", "ops:carol")
    assert kept(pg, pg_schema, "wire:1") == "3|2"
    kinds = [(r.seq, r.kind) for r in store.list_receipts("wire:1")]
    assert kinds == [(1, "reservation"), (2, "outcome"), (3, "resolution")]
    assert store.verify_receipts().ok


def test_an_older_process_statements_still_get_their_receipts(store, pg, pg_schema):
    """What a process of schema version 8 or older sends as the owner: the row and its chain
    head, no receipt of its own and no ``receipt_kept``."""
    s = f'"{pg_schema}"'
    hash_of = f"{s}.ctrlrun_receipt_hash"
    pg.psql(
        f"INSERT INTO {s}.ctrlrun_effects (key_digest, effect_key, state, action_id, attempt, "
        "created_at, updated_at, lease_expires_at, last_event, written_by, receipt_seq, "
        "receipt_hash) VALUES (sha256(convert_to('old:1', 'UTF8')), 'old:1', 'executing', "
        f"'{ACT}', 1, 5, 5, 999999999999999, 'reservation', 'old-process', 1, "
        f"{hash_of}('effect', 'old:1', NULL, '1', NULL, '5', 'reservation', NULL, '{ACT}', "
        "'1', 'executing', NULL, NULL, NULL, 'old-process'))"
    )
    # and an outcome it writes over a row a current process wrote last
    store.reserve_effect("old:2", ACT, 60)
    pg.psql(
        f"UPDATE {s}.ctrlrun_effects SET state = 'committed', updated_at = updated_at + 1, "
        "lease_expires_at = NULL, last_event = 'outcome', written_by = 'old-process', "
        "receipt_seq = receipt_seq + 1, receipt_prev = receipt_hash, "
        f"receipt_hash = {hash_of}('effect', effect_key, NULL, (receipt_seq + 1)::text, "
        "receipt_hash, (updated_at + 1)::text, 'outcome', action, action_id, attempt::text, "
        "'committed', args_digest, approval_id, resolved_by, 'old-process') "
        "WHERE effect_key = 'old:2'"
    )
    assert [r.seq for r in store.list_receipts("old:1")] == [1]
    assert [(r.seq, r.writer) for r in store.list_receipts("old:2")][-1] == (2, "old-process")
    assert len(store.list_receipts("old:2")) == 2
    assert store.get_effect("old:2").state is EffectState.COMMITTED
    assert store.verify_receipts().ok
