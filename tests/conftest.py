"""Shared fixtures: one real PostgreSQL (embedded by default), a fresh tenant per test, the
files API served on loopback once per session, and agent ``a1`` on the simulated model.

Tests use their own database, ``hango_test``, on the same server a learner's notebooks use, so
they never touch the course's data. Set ``HANGO_DATABASE_URL`` to run them against any server.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HANGO_DATABASE_NAME", "hango_test")
os.environ.setdefault("HANGO_LEARNER", "pytest")  # whose exercise passes the tests record

from parity import PLAIN, Stacks

from hango.agent.runtime import Agent
from hango.agents import AgentConfig, create_tenant, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.simulated import SimulatedModel
from hango.settings import get_settings


@pytest.fixture(scope="session")
def db() -> Iterator[Database]:
    database = Database(get_settings())
    with database.admin(all_tenants=True) as conn:
        # A clean slate (cascading to agents, files, tokens), but only of earlier runs: several
        # pytest sessions may share hango_test at once, and a fresh tenant per test isolates them.
        conn.execute("DELETE FROM tenants WHERE created_at < now() - interval '1 hour'")
    yield database
    database.close()


@pytest.fixture
def tenant(db: Database) -> str:
    """A new tenant id for this test."""
    return create_tenant(db, "t-" + uuid.uuid4().hex[:12])


@pytest.fixture(scope="session")
def api_url(db: Database) -> Iterator[str]:
    """The files API over :func:`db`, served once for the session: real HTTP on loopback
    (uvicorn in a thread). It belongs to no tenant: each test makes its own tenant and tokens.
    A test that needs other settings, another database or a scripted model serves its own app
    and says why."""
    url, stop = serve_in_thread(create_app(db))
    yield url
    stop()


@pytest.fixture
def stacks() -> Stacks:
    """The plain stack, the library's default. A module that sets ``stacks = parity.both``
    (the memory and skills tests) runs each test on the plain and on the cached stack."""
    return PLAIN


@pytest.fixture
def sim_agent(db: Database, tenant: str, stacks: Stacks) -> Agent:
    """Agent ``a1`` of this test's tenant on the offline simulated model, on ``stacks``. Its
    config is read at every run, so the test saves it (``save_agent``, or :func:`backend`)."""
    return stacks.agent(db, tenant, "a1", SimulatedModel())


@pytest.fixture
def backend(db: Database, tenant: str) -> PostgresBackend:
    """An agent ``a1`` with the default config in a fresh tenant, and its filesystem."""
    save_agent(db, tenant, "a1", AgentConfig())
    return PostgresBackend(db, tenant, "a1")


@pytest.fixture
def telemetry_pair():  # type: ignore[no-untyped-def]
    """A Telemetry on private SDK providers with in-memory exporter and reader (never global)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from hango.telemetry import Telemetry

    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    return Telemetry(tracer_provider, meter_provider), exporter, reader


@pytest.fixture(scope="module")
def server_dir() -> Iterator[Path]:
    """A data folder for a PostgreSQL server of a test module's own (tests/test_faults.py,
    tests/test_managed_postgres.py), OUTSIDE pytest's temporary root: whenever any pytest
    session on the machine starts, pytest resets that root to mode 0700 and deletes all but its
    three newest session folders, which cut a running server's user (``embedded_postgres``,
    when tests run as root) off its data folder: ``pg_ctl`` then failed with "Permission
    denied" in the middle of a test."""
    path = Path(tempfile.mkdtemp(prefix="hango-server-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
