"""hango's own HTTP client (``hango.api.client``) against the real server: one kept-alive
connection, opened again whenever the server has closed it, and a clear error when no server
answers. (What each call means is in test_api.py; this is the connection under it.)"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from hango.agents import AgentConfig, create_tenant, create_token, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.api.client import ApiError, FilesClient, Unreachable
from hango.db import Database

KEEP_ALIVE = 0.3  # seconds: the server below closes a connection idle for longer


@pytest.fixture(scope="module")
def quick_server(db: Database) -> Iterator[str]:
    """The files API on a uvicorn that closes idle connections after KEEP_ALIVE s (its default
    is 5 s: a learner pausing between two notebook cells meets it)."""
    url, stop = serve_in_thread(create_app(db), timeout_keep_alive=KEEP_ALIVE)
    yield url
    stop()


def _owner(db: Database) -> str:
    tenant = create_tenant(db, "client-" + uuid.uuid4().hex[:12])
    save_agent(db, tenant, "a1", AgentConfig())
    return create_token(db, tenant, "owner")


def test_a_connection_the_server_closed_while_idle_is_opened_again(
        db: Database, quick_server: str) -> None:
    with FilesClient(quick_server, _owner(db), "a1") as files:
        assert files.write("/notes/x.md", "one") == 1
        first = files._http.conn.sock
        assert first is not None
        deadline = time.monotonic() + 30
        while not select.select([first], [], [], 0.05)[0]:  # the server's close arrives
            assert time.monotonic() < deadline, "the server never closed the idle connection"
        assert files.read_versioned("/notes/x.md") == ("one", 1)
        assert files._http.conn.sock is not first  # a new connection, the closed one dropped
        assert files.write("/notes/x.md", "two", if_version=1) == 2  # and it is kept alive
        assert files.read("/notes/x.md") == "two"


@pytest.mark.parametrize("size", [1, 8 << 20])  # over the limit by a byte, and by 7 MiB
def test_a_refusal_before_the_body_is_read_is_the_servers_answer(
        db: Database, api_url: str, size: int) -> None:
    """The server answers 413 (or 401) from the headers and closes the connection while the
    client is still sending a large body: the client reads that answer, then goes on."""
    too_big = "x" * (db.settings.max_body_bytes + size)
    owner = _owner(db)
    with FilesClient(api_url, owner, "a1") as files:
        with pytest.raises(ApiError) as refused:
            files.write("/notes/big.md", too_big)  # 413 with Connection: close
        assert refused.value.status == 413 and "HANGO_MAX_BODY_BYTES" in refused.value.message
        assert files.write("/notes/ok.md", "ok") == 1
    with FilesClient(api_url, "not-a-token", "a1") as stranger, \
            pytest.raises(ApiError) as refused:
        stranger.write("/notes/big.md", too_big)
    assert refused.value.status == 401


def test_threads_sharing_a_client_take_turns(db: Database, api_url: str) -> None:
    with FilesClient(api_url, _owner(db), "a1") as files:
        files.write("/notes/x.md", "shared")
        errors: list[BaseException] = []

        def reader() -> None:
            try:
                for _ in range(50):
                    assert files.read("/notes/x.md") == "shared"
            except BaseException as exc:  # reported below, in the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=reader) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []


def test_descriptors_over_1024_are_no_problem(db: Database) -> None:
    """``select()`` refuses a file descriptor of 1024 or more; a server or a notebook with many
    files open has them. The client's and the pool's checks of an idle connection must not."""
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        url, stop = serve_in_thread(create_app(db))  # its loop's pool: descriptors over 1100
        try:
            with FilesClient(url, _owner(db), "a1") as files:
                files.write("/notes/x.md", "many files open")
                assert files._http.conn.sock is not None
                assert files._http.conn.sock.fileno() > 1024
                for _ in range(3):  # the 2nd and 3rd reuse both connections: both are checked
                    assert files.read("/notes/x.md") == "many files open"
        finally:
            stop()
    finally:
        for fd in held:
            os.close(fd)


def test_json_bodies_and_query_strings_keep_their_text(db: Database, api_url: str) -> None:
    with FilesClient(api_url, _owner(db), "a1") as files:
        files.write("/notes/fr é.md", "Réponds en français 🙂")
        files.write("/notes/other.txt", "")
        assert files.edit("/notes/fr é.md", "français 🙂", "日本語") == 2
        assert files.read("/notes/fr é.md") == "Réponds en 日本語"
        assert files.glob("/notes/*é.md") == ["/notes/fr é.md"]
        assert [e.path for e in files.iter_ls("/notes", limit=1)] == [
            "/notes/fr é.md", "/notes/other.txt"]


def test_no_server_is_unreachable_naming_the_address() -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]  # bound, not listening: the connection is refused
        with (FilesClient(f"http://127.0.0.1:{port}/", "t", "a1", timeout=5) as files,
              pytest.raises(Unreachable, match=f"no answer from http://127.0.0.1:{port}")):
            files.read("/notes/x.md")


@pytest.mark.parametrize("url", ["127.0.0.1:8765", "ftp://127.0.0.1", "http://"])
def test_a_base_url_that_is_not_http_is_refused_naming_it(url: str) -> None:
    with pytest.raises(ValueError, match="base_url must be http://host"):
        FilesClient(url, "t", "a1")
