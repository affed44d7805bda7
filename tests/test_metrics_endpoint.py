"""`/metrics` after a real run: exactly the predicted series, every series the dashboard queries;
loopback clients only; off by default.

``hango serve --metrics``: Prometheus text format on ``/metrics``, for loopback clients only.

One real agent run records into a Prometheus-exporter meter provider; the files API serves its
``/metrics`` over real HTTP on loopback. The scraped series must be exactly the names
:func:`hango.telemetry.prometheus_series` predicts, and must cover every series the Grafana
dashboard in ``deploy/grafana`` queries.
"""

from __future__ import annotations

import httpx
from starlette.testclient import TestClient
from test_compose import parse_promql, prom_targets

from hango import telemetry as t
from hango.agent.runtime import Agent
from hango.agents import AgentConfig, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.cli import _parser
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.simulated import SimulatedModel, tool_call


def test_metrics_scrape_has_the_series_the_dashboard_queries(db: Database, tenant: str) -> None:
    provider, registry = t.prometheus_meter_provider()
    save_agent(db, tenant, "a1", AgentConfig(tools=["ls", "write_file"], memory=["/memories/AGENTS.md"],
                                                 reserved_writes="ask"))
    fs = PostgresBackend(db, tenant, "a1")
    fs.write("/memories/AGENTS.md", "Answer in French.\n")
    fs.write("/skills/bad/SKILL.md", "---\nname: bad\n---\nno description\n")
    model = SimulatedModel(policy=[  # a tool call, then a proposal (the run waits)
        [tool_call("ls", {"path": "/"})],
        [tool_call("write_file", {"path": "/memories/notes.md", "content": "x"})]])
    Agent(db, tenant, "a1", model, telemetry=t.Telemetry(meter_provider=provider)).run("hi")

    app = create_app(db)  # its own server: the /metrics route is this test's registry
    t.add_metrics_route(app, registry)
    base, stop = serve_in_thread(app)
    try:
        reply = httpx.get(base + "/metrics", timeout=10)
        openmetrics = httpx.get(base + "/metrics", timeout=10, headers={
            "Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"})
    finally:
        stop()
        provider.shutdown()
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    assert openmetrics.text.rstrip().endswith("# EOF")
    scraped = t.scrape_names(reply.text)
    ours = {name for name in scraped if name.startswith(("hango_", "gen_ai_"))}
    assert ours == {s for spec in t.INSTRUMENTS for s in t.prometheus_series(spec)}
    queried = {name for expr in prom_targets() for name in parse_promql(expr)[0]}
    assert queried and queried <= scraped, f"dashboard series not served: {queried - scraped}"
    assert "hango_skills_invalid{" in reply.text and "hango_memory_bytes_bucket{" in reply.text
    assert 'hango_cache_miss_reason="below_minimum"' in reply.text  # the default prompt is short


def test_metrics_refuses_clients_that_are_not_loopback() -> None:
    provider, registry = t.prometheus_meter_provider()
    app = create_app()
    t.add_metrics_route(app, registry)
    with TestClient(app) as client:  # its client address is "testclient", not loopback
        reply = client.get("/metrics")
    provider.shutdown()
    assert reply.status_code == 403
    assert "loopback clients only" in reply.text
    assert "/metrics" not in app.openapi()["paths"]  # not part of the files API contract


def test_serve_metrics_is_off_by_default() -> None:
    assert _parser().parse_args(["serve"]).metrics is False
    assert _parser().parse_args(["serve", "--metrics"]).metrics is True
