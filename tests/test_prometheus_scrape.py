"""Debian/Ubuntu's `prometheus` scrapes `/metrics` after real runs and every PromQL query of the
dashboard returns data; skipped without a `prometheus` binary.

The README recipe, for real: Debian/Ubuntu's ``prometheus`` scrapes ``/metrics``, and every
PromQL query of the Grafana dashboard in ``deploy/grafana`` returns data.

Skipped when no ``prometheus`` binary is on PATH (``sudo apt install prometheus``). Prometheus
runs on a free loopback port with a temporary data directory and is stopped at the end.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from test_compose import prom_targets

from hango import telemetry as t
from hango.agent.runtime import Agent
from hango.agents import AgentConfig, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.simulated import SimulatedModel, tool_call

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None,
                                reason="no prometheus binary (Debian/Ubuntu: apt install prometheus)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as reply:
        body = json.load(reply)
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def grafana(expr: str) -> str:
    """The dashboard's variables as Grafana would fill them (``$service`` = All)."""
    return (expr.replace("$service", ".*").replace("$__rate_interval", "30s")
            .replace("$__range", "5m"))


def test_prometheus_scrapes_metrics_and_every_dashboard_query_has_data(
        db: Database, tenant: str, tmp_path: Path) -> None:
    provider, registry = t.prometheus_meter_provider()
    tel = t.Telemetry(meter_provider=provider)
    save_agent(db, tenant, "a1", AgentConfig(tools=["ls", "write_file"], memory=["/memories/AGENTS.md"],
                                                 reserved_writes="ask"))
    fs = PostgresBackend(db, tenant, "a1")
    fs.write("/memories/AGENTS.md", "Answer in French.\n")
    fs.write("/skills/bad/SKILL.md", "---\nname: bad\n---\nno description\n")

    def run() -> None:
        model = SimulatedModel(policy=[  # a tool call, then a proposal (the run waits)
        [tool_call("ls", {"path": "/"})],
        [tool_call("write_file", {"path": "/memories/notes.md", "content": "x"})]])
        Agent(db, tenant, "a1", model, telemetry=tel).run("hi")

    run()
    app = create_app(db)  # its own server: the /metrics route is this test's registry
    t.add_metrics_route(app, registry)
    base, stop_api = serve_in_thread(app)
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: hango\n"
        f"    static_configs: [{{targets: ['{base.removeprefix('http://')}']}}]\n")
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        samples = 0.0
        ran_again = False
        while time.monotonic() < deadline:
            try:
                got = query(port, 'count_over_time(hango_skills_indexed{job="hango"}[5m])')
                samples = float(got[0]["value"][1]) if got else 0.0
            except OSError:
                samples = 0.0
            if samples >= 2 and not ran_again:
                run()  # a second run between scrapes: the rates have something to show
                ran_again = True
            if ran_again and samples >= 5:
                break
            time.sleep(0.5)
        assert samples >= 5, "Prometheus did not scrape /metrics"
        empty = [expr for expr in prom_targets() if not query(port, grafana(expr))]
        assert not empty, f"dashboard queries without data: {empty}"
        assert query(port, 'up{job="hango"}')[0]["value"][1] == "1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        stop_api()
        provider.shutdown()
