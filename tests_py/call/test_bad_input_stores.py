"""Bad store URLs and files, bad templates, and which store a protected call uses by default:
each a typed ctrlrun error, nothing half-written."""

from __future__ import annotations

import os

import pytest

import ctrlrun
from ctrlrun import EffectState, InvalidArgument, StoreError

# --------------------------------------------------------------------------------------------
# leases
# --------------------------------------------------------------------------------------------


def test_unknown_scheme_is_refused():
    with pytest.raises(InvalidArgument) as ei:
        ctrlrun.open_store("redis://x")
    assert "redis" in str(ei.value)
    assert "scheme" in str(ei.value)


@pytest.mark.parametrize("url", [":memory:", "sqlite://", "sqlite:///:memory:"])
def test_in_memory_or_pathless_sqlite_is_refused(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgument) as ei:
        ctrlrun.open_store(url)
    msg = str(ei.value).lower()
    assert "memory" in msg or "path" in msg
    assert not any(
        p.name.endswith((".db", "memory:")) or p.name == ":memory:" for p in tmp_path.iterdir()
    )


def _assert_store_error_naming(excinfo_value, path):
    e = excinfo_value
    assert isinstance(e, Exception), f"{type(e)!r} is a BaseException (a panic?), not an Exception"
    assert isinstance(e, StoreError), f"expected StoreError, got {type(e).__name__}: {e}"
    assert str(path) in str(e)


def test_store_path_under_a_regular_file_is_a_store_error_naming_the_path(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    path = afile / "state.db"
    try:
        s = ctrlrun.open_store(f"sqlite:///{path}")
        s.list_effects()
    except BaseException as e:
        _assert_store_error_naming(e, path)
    else:
        pytest.fail("opening a store under a regular file succeeded")
    assert afile.read_text() == "not a directory"


def test_random_bytes_file_is_a_store_error_naming_the_path(tmp_path):
    path = tmp_path / "random.db"
    junk = os.urandom(4096)
    if junk.startswith(b"SQLite format 3\x00"):  # pragma: no cover - 2**-128
        junk = b"x" + junk[1:]
    path.write_bytes(junk)
    try:
        s = ctrlrun.open_store(f"sqlite:///{path}")
        s.list_effects()
    except BaseException as e:
        _assert_store_error_naming(e, path)
    else:
        pytest.fail("a file of random bytes opened as a store")
    assert path.read_bytes() == junk  # never overwritten


def test_random_bytes_file_fails_the_protected_call_without_running_it(tmp_path):
    path = tmp_path / "random2.db"
    path.write_bytes(os.urandom(4096))
    calls = []

    @ctrlrun.protect("x", effect="x:{a}", store=f"sqlite:///{path}")
    def f(a):
        calls.append(a)

    try:
        f("1")
    except BaseException as e:
        _assert_store_error_naming(e, path)
    else:
        pytest.fail("a protected call on a corrupt store ran")
    assert calls == []


# --------------------------------------------------------------------------------------------
# templates
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "template, char, pos",
    [
        ("refund:{id", "{", 7),
        ("refund:id}", "}", 9),
        ("a}b{c}", "}", 1),
        ("{a}{", "{", 3),
        ("{}", None, 0),
        ("{{a}}", None, None),
        ("{a.b}", None, None),
        ("{a[0]}", None, None),
        ("{a:>3}", None, None),
        ("{a!r}", None, None),
        ("{0}", None, None),
        ("{ a}", None, None),
    ],
)
def test_bad_template_is_refused_at_decoration_naming_the_position(store, template, char, pos):
    def f(a, id=None):
        raise AssertionError("must not run")

    with pytest.raises(InvalidArgument) as ei:
        ctrlrun.protect("t", effect=template, store=store)(f)
    msg = str(ei.value)
    assert template in msg
    assert "position" in msg
    if char is not None:
        assert char in msg
    if pos is not None:
        assert f"position {pos}" in msg
    assert store.list_effects() == []


def test_unicode_identifier_placeholder_is_accepted(store):
    @ctrlrun.protect("t", effect="k:{año}", store=store)
    def f(año):
        return año

    f("2024")
    assert [r.effect_key for r in store.list_effects()] == ["k:2024"]


# --------------------------------------------------------------------------------------------
# the default store (docs/spec.md §8.3)
# --------------------------------------------------------------------------------------------


def _protected():
    calls = []

    @ctrlrun.protect("default", effect="d:{a}")
    def f(a):
        calls.append(a)
        return a

    return f, calls


def _rows_at(path):
    with ctrlrun.open_store(f"sqlite:///{path}") as s:
        return [(r.effect_key, r.state) for r in s.list_effects()]


def test_ctrlrun_store_url_is_the_default(tmp_path, monkeypatch):
    target = tmp_path / "from_store_env.db"
    state = tmp_path / "from_state_env.db"
    monkeypatch.setenv("CTRLRUN_STORE", f"sqlite:///{target}")
    monkeypatch.setenv("CTRLRUN_STATE", str(state))  # CTRLRUN_STORE wins
    f, calls = _protected()
    assert f("1") == "1"
    assert calls == ["1"]
    assert _rows_at(target) == [("d:1", EffectState.COMMITTED)]
    assert not state.exists()


def test_ctrlrun_state_path_is_the_default(tmp_path, monkeypatch):
    target = tmp_path / "sub" / "state_env.db"
    monkeypatch.setenv("CTRLRUN_STATE", str(target))
    f, _calls = _protected()
    assert f("2") == "2"
    assert _rows_at(target) == [("d:2", EffectState.COMMITTED)]
    assert not (tmp_path / "default.db").exists()


def test_without_env_the_default_is_dot_ctrlrun_state_db_under_cwd(tmp_path, monkeypatch):
    monkeypatch.delenv("CTRLRUN_STATE", raising=False)
    monkeypatch.delenv("CTRLRUN_STORE", raising=False)
    from ctrlrun.store.api import use_when_default_is_unset

    use_when_default_is_unset(None)  # outside pytest's plugin: the working directory's file
    monkeypatch.chdir(tmp_path)
    f, _calls = _protected()
    assert f("3") == "3"
    target = tmp_path / ".ctrlrun" / "state.db"
    assert target.is_file()
    assert _rows_at(target) == [("d:3", EffectState.COMMITTED)]


def test_default_store_is_looked_up_at_call_time(tmp_path, monkeypatch):
    f, calls = _protected()  # decorated before the environment names the store
    first = tmp_path / "first.db"
    second = tmp_path / "second.db"
    monkeypatch.setenv("CTRLRUN_STATE", str(first))
    f("4")
    monkeypatch.setenv("CTRLRUN_STATE", str(second))
    f("4")  # a different store: not a duplicate
    assert calls == ["4", "4"]
    assert _rows_at(first) == [("d:4", EffectState.COMMITTED)]
    assert _rows_at(second) == [("d:4", EffectState.COMMITTED)]


def test_set_default_store_overrides_the_environment(tmp_path, monkeypatch, store, second_store):
    env_target = tmp_path / "env.db"
    monkeypatch.setenv("CTRLRUN_STATE", str(env_target))
    ctrlrun.set_default_store(store)
    f, _calls = _protected()
    f("5")
    assert [(r.effect_key, r.state) for r in second_store.list_effects()] == [
        ("d:5", EffectState.COMMITTED)
    ]
    assert not env_target.exists()
