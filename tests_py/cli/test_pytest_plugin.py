"""The pytest plugin, proven in real inner pytest runs (pytester)."""

from __future__ import annotations

pytest_plugins = ["pytester"]

INNER = """
import ctrlrun
from ctrlrun import EffectState

sent = []

@ctrlrun.protect("mail.send", effect="email:{message_id}", lease=60)
def send(message_id: str) -> str:
    sent.append(message_id)
    return "ok"

def test_default_store_is_the_fixture(ctrlrun_store, ctrlrun_assert):
    assert ctrlrun.default_store() is ctrlrun_store
    assert send("m1") == "ok"
    ctrlrun_assert.committed_once("email:m1")
    assert ctrlrun_store.get_effect("email:m1").state is EffectState.COMMITTED
    with __import__("pytest").raises(ctrlrun.DuplicateEffect):
        send("m1")

def test_each_test_gets_a_fresh_store(ctrlrun_store, ctrlrun_assert):
    ctrlrun_assert.no_effect("email:m1")
    assert send("m1") == "ok"

def test_clock_lapses_a_lease_without_sleeping(ctrlrun_store, ctrlrun_clock, ctrlrun_assert):
    ctrlrun_store.reserve_effect("email:m2", "act_" + "a" * 32, 60)
    ctrlrun_clock.advance(61)
    with __import__("pytest").raises(ctrlrun.AmbiguousEffect):
        send("m2")
    ctrlrun_assert.state("email:m2", "ambiguous")

def test_committed_once_fails_on_a_retried_effect(ctrlrun_store, ctrlrun_assert):
    r = ctrlrun_store.reserve_effect("k", "act_" + "b" * 32, 60)
    ctrlrun_store.fail_effect("k", r.action_id, "nothing sent")
    r = ctrlrun_store.reserve_effect("k", "act_" + "c" * 32, 60)
    ctrlrun_store.begin_execution("k", r.action_id)
    ctrlrun_store.commit_effect("k", r.action_id, 1)
    with __import__("pytest").raises(AssertionError, match="one attempt"):
        ctrlrun_assert.committed_once("k")
"""


def test_plugin_fixtures_in_an_inner_run(pytester, tmp_path, monkeypatch):
    monkeypatch.setenv("CTRLRUN_STATE", str(tmp_path / "production.db"))
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=4)
    assert not (tmp_path / "production.db").exists()  # the user's store was never touched


def test_default_store_is_restored_after_the_test(pytester):
    pytester.makepyfile(
        test_restore="""
import ctrlrun

marker = ctrlrun.open_store("sqlite:///" + __import__("os").path.abspath("outer.db"))

def test_a(ctrlrun_store):
    ctrlrun.set_default_store(marker)
    ctrlrun.set_default_store(ctrlrun_store)

def test_b_after():
    # the fixture restored the override that was in force before it (none)
    assert ctrlrun.set_default_store(None) is None
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=2)


def test_postgres_fixture_uses_its_own_schema_and_drops_it(pytester, pg, monkeypatch, tmp_path):
    pytester.makepyfile(
        test_pg="""
import os, pathlib
import ctrlrun

@ctrlrun.protect("pay", effect="pay:{order}")
def pay(order: str) -> int:
    return 1

def test_pg(ctrlrun_postgres_store, ctrlrun_clock):
    assert ctrlrun.default_store() is ctrlrun_postgres_store
    assert "schema=ctrlrun_scratch_" in ctrlrun_postgres_store.url
    assert pay("o1") == 1
    assert ctrlrun_postgres_store.get_effect("pay:o1").state.value == "committed"
    schema = ctrlrun_postgres_store.url.split("schema=", 1)[1].split("&", 1)[0]
    pathlib.Path(os.environ["SCHEMA_FILE"]).write_text(schema)
"""
    )
    monkeypatch.setenv("CTRLRUN_TEST_POSTGRES_URL", pg.url())
    monkeypatch.setenv("SCHEMA_FILE", str(tmp_path / "schema"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1)
    # Its own schema only: other workers' tests make and drop theirs on the same server.
    schema = (tmp_path / "schema").read_text()
    assert schema.startswith("ctrlrun_scratch_") and schema not in pg.schemas()  # dropped


def test_postgres_fixture_without_a_server_says_why(pytester, monkeypatch):
    monkeypatch.delenv("CTRLRUN_TEST_POSTGRES_URL", raising=False)
    pytester.makepyfile(test_nopg="def test_pg(ctrlrun_postgres_store):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*CTRLRUN_TEST_POSTGRES_URL is not set*"])


def test_a_test_that_forgets_the_fixture_never_writes_the_real_store(pytester, monkeypatch):
    """No store given, no CTRLRUN_STORE/CTRLRUN_STATE: the call goes to a temporary store of
    that test, never to .ctrlrun/state.db in the working directory; each test gets its own."""
    monkeypatch.delenv("CTRLRUN_STORE", raising=False)
    monkeypatch.delenv("CTRLRUN_STATE", raising=False)
    pytester.makepyfile(
        test_forgot="""
import os
import ctrlrun

ran = []

@ctrlrun.protect("pay", effect="pay:{order}")
def pay(order: str) -> int:
    ran.append(order)
    return 1

def test_one():
    assert pay("o1") == 1
    url = ctrlrun.default_store().url
    assert "ctrlrun-default" in url, url
    assert os.path.join(os.getcwd(), ".ctrlrun") not in url, url

def test_two_gets_a_fresh_one():
    assert pay("o1") == 1  # not refused: test_one's store is gone
    assert ran == ["o1", "o1"]
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=2)
    assert not (pytester.path / ".ctrlrun").exists(), "the working directory's store was untouched"


def test_fixtures_of_every_scope_never_write_the_real_store(pytester, monkeypatch):
    """A session-, module- or class-scoped fixture that makes a protected call as it is set up
    or torn down goes to a temporary store of its scope, never to .ctrlrun/state.db in the
    working directory; each scope's store is its own."""
    monkeypatch.delenv("CTRLRUN_STORE", raising=False)
    monkeypatch.delenv("CTRLRUN_STATE", raising=False)
    pytester.makeconftest("""
import pytest
import ctrlrun

urls = {}

@ctrlrun.protect("seed", effect="seed:{name}")
def seed(name):
    return ctrlrun.default_store().url

@pytest.fixture(scope="session")
def seeded_session():
    urls["session"] = seed("s")
    yield
    seed("s-teardown")

@pytest.fixture(scope="module")
def seeded_module():
    urls["module"] = seed("m")
    yield
    seed("m-teardown")

@pytest.fixture(scope="class")
def seeded_class():
    urls["class"] = seed("c")
    yield
    seed("c-teardown")
""")
    pytester.makepyfile(
        test_scopes="""
import os
import pytest
from conftest import urls

@pytest.mark.usefixtures("seeded_session", "seeded_module")
def test_session_and_module():
    assert "ctrlrun-default-session" in urls["session"], urls
    assert "ctrlrun-default-module" in urls["module"], urls

@pytest.mark.usefixtures("seeded_class")
class TestInAClass:
    def test_class(self):
        assert "ctrlrun-default-class" in urls["class"], urls
        assert len(set(urls.values())) == 3, urls
        assert not any(os.path.join(os.getcwd(), ".ctrlrun") in u for u in urls.values())
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=2)
    assert not (pytester.path / ".ctrlrun").exists(), "the working directory's store was untouched"


def test_a_named_store_variable_is_still_obeyed_under_pytest(pytester, tmp_path, monkeypatch):
    monkeypatch.setenv("CTRLRUN_STATE", str(tmp_path / "chosen.db"))
    pytester.makepyfile(
        test_env="""
import ctrlrun

def test_env():
    ctrlrun.protect("pay", effect="pay:{order}")(lambda order: 1)("o1")
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1)
    with __import__("ctrlrun").open_store(str(tmp_path / "chosen.db")) as store:
        assert store.get_effect("pay:o1").state.value == "committed"


def test_ctrlrun_assert_with_the_postgres_fixture_checks_postgres(pytester, pg, monkeypatch):
    pytester.makepyfile(
        test_pg_assert="""
import ctrlrun

@ctrlrun.protect("pay", effect="pay:{order}")
def pay(order: str) -> int:
    return 1

def test_pg(ctrlrun_postgres_store, ctrlrun_assert):
    assert ctrlrun_assert.store is ctrlrun_postgres_store
    assert ctrlrun.default_store() is ctrlrun_postgres_store
    assert pay("o1") == 1
    ctrlrun_assert.committed_once("pay:o1")
"""
    )
    monkeypatch.setenv("CTRLRUN_TEST_POSTGRES_URL", pg.url())
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1)
