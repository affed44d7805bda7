"""Runs share the server fairly (hango/api/run_limits.py), on real HTTP.

Tenant A's runs are held inside the model (a scripted model waiting on an event) while tenant B
writes, lists and runs: B's requests complete, and A's run beyond HANGO_TENANT_MAX_RUNS is 429
with Retry-After. The server's default thread limiter (the file routes' threads) is shrunk
below A's number of held runs, so a run that took one of those threads would block B's PUT.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import anyio.to_thread
import httpx
import pytest
from fastapi import FastAPI

from hango.agents import create_tenant, create_token, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.db import Database
from hango.models.base import Request, Response
from hango.models.simulated import SimulatedModel
from hango.settings import load_settings

HELD = 3  # A's runs held in the model: its HANGO_TENANT_MAX_RUNS
FILE_THREADS = 2  # the server's default threads, fewer than A's held runs


class HeldModel(SimulatedModel):
    """Answers at once, except a prompt containing "hold": that call waits for ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)

    def complete(self, request: Request) -> Response:
        if "hold" in request.messages[-1].text:
            self.entered.release()
            self.release.wait()
        return super().complete(request)  # the simulator serves one call at a time itself


@pytest.fixture
def server(db: Database) -> Iterator[tuple[str, FastAPI, HeldModel]]:
    settings = load_settings(tenant_max_runs=HELD, run_threads=HELD + 2)
    app = create_app(db, settings)
    model = app.state.hango_model = HeldModel()
    url, stop = serve_in_thread(app)

    async def shrink() -> None:
        anyio.to_thread.current_default_thread_limiter().total_tokens = FILE_THREADS

    asyncio.run_coroutine_threadsafe(shrink(), app.state.hango_loop).result(timeout=10)
    try:
        yield url, app, model
    finally:
        model.release.set()
        stop()


def test_other_tenants_are_served_while_one_tenants_runs_wait_and_its_next_run_is_429(
        db: Database, server: tuple[str, FastAPI, HeldModel]) -> None:
    url, _, model = server
    tenants = {}
    for name in ("a", "b"):
        tenant = create_tenant(db, f"limits-{name}-{uuid.uuid4().hex[:12]}")
        save_agent(db, tenant, "a1")
        tenants[name] = {"Authorization": f"Bearer {create_token(db, tenant, 'owner')}"}
    a = httpx.Client(base_url=url, headers=tenants["a"], timeout=60)
    b = httpx.Client(base_url=url, headers=tenants["b"], timeout=30)
    with ThreadPoolExecutor(HELD) as pool, a, b:
        held: list[Future[httpx.Response]] = [
            pool.submit(httpx.post, f"{url}/v1/agents/a1/runs", headers=tenants["a"],
                        json={"prompt": "hold on"}, timeout=60) for _ in range(HELD)]
        try:
            for _ in range(HELD):
                assert model.entered.acquire(timeout=30), "A's runs did not reach the model"

            # Tenant B is served: a PUT and a listing (threads of the file routes) and a run.
            put = b.put("/v1/agents/a1/files/notes/b.md", content=b"B's note")
            assert put.status_code == 201, put.text
            listing = b.get("/v1/agents/a1/files", params={"dir": "/notes/"})
            assert listing.status_code == 200
            assert [e["path"] for e in listing.json()["entries"]] == ["/notes/b.md"]
            run = b.post("/v1/agents/a1/runs", json={"prompt": "hello"})
            assert run.status_code == 201, run.text
            assert run.json()["status"] == "done"

            # Tenant A's next run (and resume) is refused at once, saying why and when to retry.
            more = a.post("/v1/agents/a1/runs", json={"prompt": "one more"})
            assert more.status_code == 429, more.text
            assert more.headers["Retry-After"] == "1"
            assert more.json()["detail"] == (
                f"this tenant already has {HELD} runs in progress (HANGO_TENANT_MAX_RUNS={HELD} "
                "per server process); nothing was run: try again when one has ended")
            resume = a.post("/v1/agents/a1/runs/nope/resume")
            assert resume.status_code == 429
        finally:
            model.release.set()
        assert [f.result(timeout=60).status_code for f in held] == [201] * HELD
    # Once A's runs have ended, A runs again.
    with httpx.Client(base_url=url, headers=tenants["a"], timeout=30) as a:
        again = a.post("/v1/agents/a1/runs", json={"prompt": "now"})
        assert again.status_code == 201, again.text


def test_the_defaults() -> None:
    settings = load_settings()
    assert (settings.tenant_max_runs, settings.run_threads) == (8, 32)
