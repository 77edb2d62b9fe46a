"""``ctrlrun console`` and ``ctrlrun approvers`` as commands: loopback unless TLS (or an explicit
flag), TLS through uvicorn with a Secure cookie, a clean one-line error for bad input, and the
accounts (only a hash of a secret is stored)."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time

import httpx2 as httpx
import pytest
from click.testing import CliRunner

import ctrlrun
from ctrlrun.cli.main import cli
from ctrlrun.console import accounts
from tests_py.console.rig import ROOT, csrf_in
from tests_py.support.certs import make_certs
from tests_py.support.cli import assert_one_line_error, free_port

LAUNCH = [sys.executable, "-m", "ctrlrun"]


def env() -> dict:
    return dict(os.environ, PYTHONPATH=f"{ROOT / 'python'}{os.pathsep}{ROOT}")


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*LAUNCH, *args], capture_output=True, text=True, env=env(), cwd=ROOT, timeout=timeout
    )


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--listen", "0.0.0.0:8780"], ["refusing to listen on 0.0.0.0", "--certfile"]),
        (["--listen", "[::]:8780"], ["refusing to listen on ::"]),
        (["--listen", "10.1.2.3:8780"], ["not a loopback address"]),
        (["--listen", "example.com:8780"], ["must be an IP address"]),
        (["--listen", "127.0.0.1:99999"], ["port must be a number"]),
        (["--listen", "nonsense"], ["give HOST:PORT"]),
        (["--certfile", "/nonexistent.pem"], ["both --certfile and --keyfile"]),
        (["--certfile", "/no/c.pem", "--keyfile", "/no/k.pem"], ["cannot be loaded"]),
        (["--trust-proxy-header", "X-Forwarded-User"], ["needs --trusted-proxy"]),
        (["--trust-proxy-header", "X-User", "--trusted-proxy", "nope"], ["not an IP address"]),
        (["--trust-proxy-header", "X User", "--trusted-proxy", "10.0.0.5"], ["not a header"]),
        (["--trust-proxy-header", "X-User:", "--trusted-proxy", "10.0.0.5"], ["not a header"]),
        (["--console-url", "javascript:alert(1)"], ["--console-url must be an https:// URL"]),
        (["--console-url", "http://example.com"], ["http:// to a host that is not loopback"]),
        (["--console-url", "https://u:pw@example.com"], ["must not carry a user name"]),
        (["--allowed-host", "https://console.example.com/"], ["--allowed-host", "not a host"]),
        (["--allowed-host", "bad_name!"], ["--allowed-host 'bad_name!' is not a host name"]),
    ],
)
def test_bad_console_options_are_one_clean_line(args, needles, tmp_path):
    proc = run("console", "--store", f"sqlite:///{tmp_path}/s.db", *args)
    assert_one_line_error(proc, *needles)


def _serve(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*LAUNCH, "console", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
        cwd=ROOT,
    )


def _listening(proc: subprocess.Popen) -> str:
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert line.startswith("ctrlrun console: http"), line
    return line.split()[2]


def _stop(proc: subprocess.Popen) -> str:
    """Stop the console: what it wrote to stderr beyond what was read. Read through the same
    buffered file as ``_listening``: ``communicate`` reads the pipe itself, and would miss the
    lines a ``readline`` took in ahead."""
    proc.terminate()
    proc.wait(timeout=20)
    assert proc.stderr is not None
    return proc.stderr.read()


def test_a_non_loopback_address_is_served_when_allowed_explicitly(tmp_path):
    port = free_port()
    proc = _serve(
        "--store",
        f"sqlite:///{tmp_path}/s.db",
        "--listen",
        f"0.0.0.0:{port}",
        "--allow-insecure-listen",
    )
    try:
        assert _listening(proc) == f"http://0.0.0.0:{port}"
        r = httpx.get(f"http://127.0.0.1:{port}/approvals", timeout=10)
        assert r.status_code == 303 and r.headers["location"].startswith("/signin")
        # any of this machine's addresses; no name but the console's own
        r = httpx.get(f"http://127.0.0.1:{port}/signin", headers={"Host": "10.1.2.3"})
        assert r.status_code == 200
        r = httpx.get(f"http://127.0.0.1:{port}/signin", headers={"Host": "evil.example"})
        assert r.status_code == 421 and "--allowed-host evil.example" in r.text
    finally:
        err = _stop(proc)
    assert "Traceback" not in err


def test_the_console_answers_its_own_names_only(tmp_path):
    port = free_port()
    proc = _serve(
        "--store",
        f"sqlite:///{tmp_path}/s.db",
        "--listen",
        f"127.0.0.1:{port}",
        "--console-url",
        "https://Approvals.Example.org:8443/",
        "--allowed-host",
        "console.example.com",
    )
    try:
        url = _listening(proc)
        for host in ("console.example.com", "approvals.example.org:443", f"localhost:{port}"):
            r = httpx.get(url + "/signin", headers={"Host": host}, timeout=10)
            assert r.status_code == 200 and "ctrlrun_signin" in r.cookies, host
        for host in ("evil.example", "console.example.com.evil.example", "10.1.2.3"):
            r = httpx.get(url + "/signin", headers={"Host": host}, timeout=10)
            assert r.status_code == 421 and not r.cookies, host
            assert "csrf" not in r.text and f"--allowed-host {host}" in r.text
    finally:
        err = _stop(proc)
    assert "Traceback" not in err


def test_tls_is_served_with_a_secure_cookie(tmp_path):
    certs = make_certs(str(tmp_path))
    store_url = f"sqlite:///{tmp_path}/s.db"
    with ctrlrun.open_store(store_url) as store:
        accounts.add(store, "alice", "a long enough secret")
    port = free_port()
    proc = _serve(
        "--store",
        store_url,
        "--listen",
        f"127.0.0.1:{port}",
        "--certfile",
        certs.server_cert,
        "--keyfile",
        certs.server_key,
    )
    try:
        url = _listening(proc)
        assert url == f"https://127.0.0.1:{port}"
        with httpx.Client(
            base_url=url, verify=ssl.create_default_context(cafile=certs.ca), timeout=10
        ) as http:
            page = http.get("/signin")
            assert page.status_code == 200 and "Secure" in page.headers["set-cookie"]
    finally:
        _stop(proc)


def test_the_default_is_loopback_8780():
    (listen,) = [p for p in cli.commands["console"].params if p.name == "listen"]
    assert listen.default == "127.0.0.1:8780"


def test_approvers_add_list_reset_remove(tmp_path, monkeypatch):
    store_url = f"sqlite:///{tmp_path}/s.db"
    runner = CliRunner()
    added = runner.invoke(cli, ["approvers", "add", "alice", "--store", store_url])
    assert added.exit_code == 0, added.output
    secret = added.stdout.strip().splitlines()[-1]
    assert len(secret) >= 40
    with ctrlrun.open_store(store_url) as store:
        stored = accounts.get(store, "alice")
        assert stored is not None and secret not in stored.secret_hash
        assert stored.secret_hash.startswith("scrypt$")
        assert accounts.check(store, "alice", secret) is not None
    again = runner.invoke(cli, ["approvers", "add", "alice", "--store", store_url])
    assert again.exit_code == 2 and "alice" in again.output
    short = runner.invoke(
        cli, ["approvers", "add", "bob", "--password-stdin", "--store", store_url], input="short\n"
    )
    assert short.exit_code == 2 and "shorter than" in short.output
    bob = runner.invoke(
        cli,
        ["approvers", "add", "bob", "--password-stdin", "--store", store_url],
        input="bob's long password\n",
    )
    assert bob.exit_code == 0 and "bob's long password" not in bob.output
    listed = runner.invoke(cli, ["approvers", "list", "--store", store_url])
    assert listed.exit_code == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["alice", "bob"]
    assert "scrypt" not in listed.stdout
    reset = runner.invoke(cli, ["approvers", "reset", "alice", "--store", store_url])
    assert reset.exit_code == 0
    new_secret = reset.stdout.strip().splitlines()[-1]
    with ctrlrun.open_store(store_url) as store:
        assert accounts.check(store, "alice", secret) is None
        assert accounts.check(store, "alice", new_secret) is not None
    removed = runner.invoke(cli, ["approvers", "remove", "bob", "--store", store_url])
    assert removed.exit_code == 0
    gone = runner.invoke(cli, ["approvers", "remove", "bob", "--store", store_url])
    assert gone.exit_code == 2 and "no approver 'bob'" in gone.output
    nobody = runner.invoke(cli, ["approvers", "reset", "carol", "--store", store_url])
    assert nobody.exit_code == 2 and "carol" in nobody.output and "Traceback" not in nobody.output


def test_the_console_says_where_it_listens_and_that_no_account_exists(tmp_path):
    port = free_port()
    proc = _serve("--store", f"sqlite:///{tmp_path}/s.db", "--listen", f"127.0.0.1:{port}")
    try:
        assert _listening(proc) == f"http://127.0.0.1:{port}"
        assert proc.stderr is not None
        assert "ctrlrun approvers add NAME" in proc.stderr.readline()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            token = csrf_in(http.get("/signin").text)
            r = http.post("/signin", data={"csrf": token, "account": "x", "secret": "y"})
            assert r.status_code == 401
        time.sleep(0.1)
    finally:
        err = _stop(proc)
    assert "Traceback" not in err and "y" not in err.split()  # no secret logged


def test_on_sqlite_the_console_says_that_whoever_can_write_the_file_decides(backend, store_url):
    """A file has no server to enforce duties: the start-up lines say so on SQLite, naming the
    file, and say nothing of it on PostgreSQL."""
    port = free_port()
    proc = _serve("--store", store_url, "--listen", f"127.0.0.1:{port}")
    try:
        _listening(proc)
        assert httpx.get(f"http://127.0.0.1:{port}/signin", timeout=10).status_code == 200
    finally:
        err = _stop(proc)  # the start-up lines were all written before it served
    said = [line for line in err.splitlines() if "separation of duties" in line]
    if backend == "postgres":
        assert said == [], err
        return
    path = store_url[len("sqlite:///") :]
    assert len(said) == 1, err
    (line,) = said
    assert line.startswith("ctrlrun console: a SQLite store enforces no separation of duties")
    assert f"anyone who can write the file {path} can approve, resolve and add accounts" in line
    assert "use PostgreSQL with roles for that (docs/roles.md)" in line
