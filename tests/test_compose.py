"""`compose.yaml` against the compose-spec schema; every image an exact version; a shell entrypoint
only in an image that has one; ports, profiles and volumes; every PromQL expression in the
dashboard names a series hango emits; no gauge inside a rate; the miss panel's key is the view's.

Compose.yaml and the Grafana provisioning, checked without a Docker engine.

* The compose file is validated against the compose-spec JSON Schema (draft 2020-12).
  ``tests/data/compose-spec.json`` is the copy vendored by the PyPI package
  ``check-jsonschema`` 0.39.0 (``check_jsonschema/builtin_schemas/vendor/compose-spec.json``,
  sha256 d549057e…0e64; Apache-2.0, licence in ``tests/data/LICENSE.compose-spec``).
* Cross-checks the schema cannot make: references, ports, credentials that must agree.
* Every PromQL expression of the dashboard must name series hango really emits: the expected
  names are derived from ``hango.telemetry.INSTRUMENTS`` through ``prometheus_series``.
* ``docker compose config -q`` runs too when the compose plugin is installed (no daemon needed).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from hango import telemetry as t

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "compose.yaml"
SCHEMA = Path(__file__).parent / "data" / "compose-spec.json"
SCHEMA_SHA256 = "d549057ebc2925f39f62799eab0db7b9e2c18b35b6c00595199116da3ed10e64"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "hango.json"
PROVIDER = ROOT / "deploy" / "grafana" / "provisioning" / "dashboards" / "hango.yaml"
README_DATABASE_URL = "postgresql://hango:hango@127.0.0.1:5432/hango"
LGTM_DATASOURCE_UIDS = {"prometheus", "tempo", "loki", "pyroscope"}  # fixed in otel-lgtm
RESOURCE_LABELS = {"service_name", "job", "instance"}  # promoted by otel-lgtm's Prometheus


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def services() -> dict[str, dict[str, Any]]:
    svc: dict[str, dict[str, Any]] = compose()["services"]
    return svc


def env(service: dict[str, Any]) -> dict[str, str]:
    raw = service.get("environment", {})
    if isinstance(raw, list):
        return dict(item.split("=", 1) for item in raw)
    return {k: str(v) for k, v in raw.items()}


def host_ports(service: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(host ip, host port, container port) of each published port, short syntax."""
    out = []
    for spec in service.get("ports", []):
        parts = str(spec).split(":")
        assert len(parts) == 3, f"publish with an explicit host ip: {spec}"
        out.append((parts[0], int(parts[1]), int(parts[2].split("/")[0])))
    return out


# --- compose ----------------------------------------------------------------------------------
def test_vendored_schema_is_the_pinned_copy() -> None:
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == SCHEMA_SHA256


def test_compose_matches_the_compose_spec_schema() -> None:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(compose()), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_the_schema_really_rejects_mistakes() -> None:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    broken = compose()
    broken["services"]["postgres"]["imagee"] = "typo"
    broken["services"]["lgtm"]["ports"] = "3000:3000"
    messages = [e.message for e in validator.iter_errors(broken)]
    assert any("imagee" in m for m in messages)
    assert any("is not of type 'array'" in m for m in messages)


def test_every_service_has_an_image_and_profiles_are_the_documented_ones() -> None:
    svc = services()
    assert all(s.get("image") for s in svc.values())
    profiles = {name: tuple(s.get("profiles", ())) for name, s in svc.items()}
    assert profiles["postgres"] == ()  # `docker compose up` starts only hango's database
    assert profiles["lgtm"] == ("observability",)
    assert {p for ps in profiles.values() for p in ps} == {"observability", "langfuse"}
    langfuse = {n for n, ps in profiles.items() if "langfuse" in ps}
    assert {
        "langfuse-web",
        "langfuse-worker",
        "langfuse-postgres",
        "clickhouse",
        "redis",
        "minio",
    } == langfuse


# An exact release: 1.2.3 (a fourth number allowed, as ClickHouse's builds have), MinIO's
# RELEASE.<date>, or PostgreSQL's major.minor (two numbers since PostgreSQL 10: 17.11 is one
# release); never a major alone (postgres:17), a floating name (latest) or no tag at all.
EXACT_TAG = re.compile(r"^(\d+\.\d+\.\d+(\.\d+)?|RELEASE\.\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ)$")
POSTGRES_TAG = re.compile(r"^\d+\.\d+$")


def exact(image: str) -> bool:
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return False
    repo, tag = last.split(":", 1)
    return bool(EXACT_TAG.match(tag) or (repo == "postgres" and POSTGRES_TAG.match(tag)))
DISTROLESS = ("cgr.dev/chainguard/", "gcr.io/distroless/")  # images built without a shell


def test_every_image_is_pinned_to_an_exact_version() -> None:
    for name, service in services().items():
        assert exact(service["image"]), f"{name}: {service['image']} is not an exact version"


@pytest.mark.parametrize("image", ["postgres:17", "cgr.dev/chainguard/minio", "redis:latest",
                                   "redis:7", "clickhouse/clickhouse-server:25.12",
                                   "docker.langfuse.com/langfuse/langfuse:4"])
def test_the_pin_rule_refuses_floating_tags(image: str) -> None:
    assert not exact(image)


def test_a_shell_entrypoint_runs_in_an_image_that_has_one() -> None:
    """The minio service runs ``sh -c 'mkdir ... && minio server ...'``: a distroless image has no
    ``sh``, and the whole Langfuse profile would wait on a service that never starts."""
    for name, service in services().items():
        entry = service.get("entrypoint") or ""
        first = (entry if isinstance(entry, str) else entry[0]).split()[0] if entry else ""
        if first in {"sh", "/bin/sh", "bash", "/bin/bash"}:
            assert not service["image"].startswith(DISTROLESS), f"{name}: no shell in {service['image']}"
    minio = services()["minio"]
    assert "mkdir -p /data/langfuse" in minio["command"]  # the bucket Langfuse writes to
    assert env(services()["langfuse-worker"])["LANGFUSE_S3_EVENT_UPLOAD_BUCKET"] == "langfuse"


def test_references_ports_and_volumes() -> None:
    doc, svc = compose(), services()
    seen: dict[int, str] = {}
    for name, s in svc.items():
        deps = s.get("depends_on", {})
        for dep in deps:
            assert dep in svc, f"{name} depends on unknown {dep}"
            assert set(svc[dep].get("profiles", ())) <= set(s.get("profiles", ())) or not svc[dep].get(
                "profiles"
            ), f"{name} depends on {dep} from another profile"
            if isinstance(deps, dict) and deps[dep].get("condition") == "service_healthy":
                assert "healthcheck" in svc[dep], f"{dep} needs a healthcheck"
        for ip, host, _ in host_ports(s):
            assert ip == "127.0.0.1", f"{name} publishes {host} beyond loopback"
            assert host not in seen, f"host port {host}: {seen.get(host)} and {name}"
            seen[host] = name
        for volume in s.get("volumes", []):
            source = str(volume).split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in (doc.get("volumes") or {}), f"undeclared volume {source}"
    assert seen == {5432: "postgres", 3000: "lgtm", 4317: "lgtm", 4318: "lgtm", 3001: "langfuse-web"}


def test_postgres_is_the_readme_database() -> None:
    pg = services()["postgres"]
    e = env(pg)
    ((ip, port, inner),) = host_ports(pg)
    url = f"postgresql://{e['POSTGRES_USER']}:{e['POSTGRES_PASSWORD']}@{ip}:{port}/{e['POSTGRES_DB']}"
    assert url == README_DATABASE_URL and inner == 5432
    assert pg["image"].split(":")[1].split(".")[0] in {"16", "17"}
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])


def test_lgtm_serves_the_otlp_endpoint_and_mounts_the_dashboard() -> None:
    lgtm = services()["lgtm"]
    assert lgtm["image"].startswith("grafana/otel-lgtm:")
    published = {host: inner for _, host, inner in host_ports(lgtm)}
    assert published[urlsplit(t.DEFAULT_OTLP_ENDPOINT).port or 0] == 4318  # OTLP/HTTP
    assert published[3000] == 3000
    mounts = {str(v).split(":")[0]: str(v).split(":")[1] for v in lgtm["volumes"]}
    provider_target = mounts["./" + str(PROVIDER.relative_to(ROOT))]
    assert provider_target.startswith("/otel-lgtm/grafana/conf/provisioning/dashboards/")
    assert provider_target.endswith(".yaml")
    dashboards_target = mounts["./" + str(DASHBOARD.parent.relative_to(ROOT))]
    provider = yaml.safe_load(PROVIDER.read_text())
    (entry,) = provider["providers"]
    assert entry["type"] == "file" and entry["options"]["path"] == dashboards_target
    home = env(lgtm)["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{dashboards_target}/{DASHBOARD.name}"


def test_langfuse_stack_agrees_with_itself_and_with_configure(monkeypatch: pytest.MonkeyPatch) -> None:
    svc = services()
    web, worker = env(svc["langfuse-web"]), env(svc["langfuse-worker"])
    # the keys hango documents are the ones the stack creates at first start
    assert web["LANGFUSE_INIT_PROJECT_PUBLIC_KEY"] == t.LANGFUSE_LOCAL_PUBLIC_KEY
    assert web["LANGFUSE_INIT_PROJECT_SECRET_KEY"] == t.LANGFUSE_LOCAL_SECRET_KEY
    for needed in (
        "LANGFUSE_INIT_ORG_ID",
        "LANGFUSE_INIT_PROJECT_ID",
        "LANGFUSE_INIT_USER_EMAIL",
        "LANGFUSE_INIT_USER_PASSWORD",
        "NEXTAUTH_SECRET",
    ):
        assert web[needed]
    # ...and the host: NEXTAUTH_URL and the published port
    assert web["NEXTAUTH_URL"] == t.LANGFUSE_LOCAL_HOST
    ((_, host_port, inner),) = host_ports(svc["langfuse-web"])
    assert (host_port, inner) == (urlsplit(t.LANGFUSE_LOCAL_HOST).port, 3000)
    # web and worker share the same settings; credentials match their services
    shared = {k: v for k, v in web.items() if not k.startswith(("LANGFUSE_INIT_", "NEXTAUTH_S"))}
    assert shared == worker
    assert worker["CLICKHOUSE_CLUSTER_ENABLED"] == "false"
    db = urlsplit(worker["DATABASE_URL"])
    lf_pg = env(svc["langfuse-postgres"])
    assert (db.hostname, db.username, db.password, db.path.strip("/")) == (
        "langfuse-postgres",
        lf_pg["POSTGRES_USER"],
        lf_pg["POSTGRES_PASSWORD"],
        lf_pg["POSTGRES_DB"],
    )
    ch = env(svc["clickhouse"])
    assert (worker["CLICKHOUSE_USER"], worker["CLICKHOUSE_PASSWORD"]) == (
        ch["CLICKHOUSE_USER"],
        ch["CLICKHOUSE_PASSWORD"],
    )
    assert worker["REDIS_AUTH"] in svc["redis"]["command"]
    assert worker["LANGFUSE_S3_EVENT_UPLOAD_SECRET_ACCESS_KEY"] == env(svc["minio"])["MINIO_ROOT_PASSWORD"]
    # what configure(mode="langfuse") says when keys are missing points at this stack
    for var in ("LANGFUSE_PUBLIC_KEY", "LANGFUSE_SECRET_KEY"):
        monkeypatch.delenv(var, raising=False)
    c = t.configure("langfuse")
    try:
        for value in (
            web["LANGFUSE_INIT_PROJECT_PUBLIC_KEY"],
            web["LANGFUSE_INIT_PROJECT_SECRET_KEY"],
            web["NEXTAUTH_URL"],
        ):
            assert value in c.message
    finally:
        c.shutdown()


@pytest.mark.skipif(shutil.which("docker") is None, reason="no docker CLI")
def test_docker_compose_config() -> None:
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode:
        pytest.skip("the docker compose plugin is not installed")
    result = subprocess.run(
        [
            "docker",
            "compose",
            "-f",
            str(COMPOSE),
            "--profile",
            "observability",
            "--profile",
            "langfuse",
            "config",
            "-q",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


# --- the dashboard --------------------------------------------------------------------------
SERIES = {series: spec for spec in t.INSTRUMENTS for series in t.prometheus_series(spec)}
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}")
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
}


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def prom_targets() -> list[str]:
    return [
        tgt["expr"]
        for p in dashboard()["panels"]
        for tgt in p.get("targets", [])
        if tgt.get("datasource", p["datasource"])["uid"] == "prometheus"
    ]


def parse_promql(expr: str) -> tuple[set[str], list[tuple[str | None, str, str, str]], set[str]]:
    """(metric names, (metric, label, op, value) matchers, grouping labels) of an expression."""
    matchers = []
    for metric, body in _SELECTOR.findall(expr):
        for label, op, value in _MATCHER.findall(body):
            matchers.append((metric or None, label, op, value))
    grouping = {
        label.strip() for group in _GROUPING.findall(expr) for label in group.split(",") if label.strip()
    }
    bare = _GROUPING.sub(" ", _SELECTOR.sub(lambda m: f" {m.group(1) or ''} ", expr))
    bare = re.sub(r"\[[^\]]*\]", " ", bare)  # range durations such as [$__rate_interval]
    names = {
        m.group(1)
        for m in re.finditer(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", bare)
        if not m.group(2) and m.group(1) not in _KEYWORDS
    }
    return names, matchers, grouping


def test_promql_parser_sees_through_a_sample() -> None:
    names, matchers, grouping = parse_promql(
        'histogram_quantile(0.95, sum by (le, job) (rate(foo_bucket{a="x",b=~"y|z"}[5m]))) / on (job) bar'
    )
    assert names == {"foo_bucket", "bar"}
    assert matchers == [("foo_bucket", "a", "=", "x"), ("foo_bucket", "b", "=~", "y|z")]
    assert grouping == {"le", "job"}


def test_dashboard_parses_and_uses_lgtm_datasources() -> None:
    dash = dashboard()
    assert dash["uid"] and dash["title"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        assert panel["datasource"]["uid"] in LGTM_DATASOURCE_UIDS
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        for target in panel["targets"]:
            assert target.get("datasource", panel["datasource"])["uid"] in LGTM_DATASOURCE_UIDS


def test_every_promql_expr_names_series_hango_emits() -> None:
    exprs = prom_targets()
    var = dashboard()["templating"]["list"][0]["query"]["query"]
    exprs_and_var = [*exprs, re.sub(r"label_values\((\w+),\s*(\w+)\)", r"\1", var)]
    used: set[str] = set()
    for expr in exprs_and_var:
        names, matchers, grouping = parse_promql(expr)
        assert names, f"no metric in {expr}"
        unknown = names - set(SERIES)
        assert not unknown, f"{expr}: {unknown} is not a series hango emits"
        used |= names
        for metric, label, op, value in matchers:
            assert metric is not None, f"matcher without a metric in {expr}"
            spec = SERIES[metric]
            allowed = {t.prometheus_label(a) for a in spec.attributes} | RESOURCE_LABELS
            if metric.endswith("_bucket"):
                allowed.add("le")
            assert label in allowed, f"{metric} has no label {label}"
            if label == t.prometheus_label(t.ATTR_TOKEN_KIND):
                values = value.split("|") if op in {"=~", "!~"} else [value]
                assert set(values) <= set(t.TOKEN_KINDS), f"unknown token kind in {expr}"
        emitted = {t.prometheus_label(a) for spec in t.INSTRUMENTS for a in spec.attributes}
        assert grouping <= emitted | RESOURCE_LABELS | {"le"}, f"{expr}: {grouping}"
    # every instrument is on the dashboard, and with the series its kind produces
    assert {SERIES[name].name for name in used} == {spec.name for spec in t.INSTRUMENTS}


def test_dashboard_shows_what_the_brief_asks() -> None:
    exprs = prom_targets()
    duration = t.prometheus_series(next(s for s in t.INSTRUMENTS if s.name == t.METRIC_MEMORY_LOAD_DURATION))[
        0
    ]
    for q in ("0.5", "0.95"):
        assert any(f"histogram_quantile({q}," in e and duration in e for e in exprs)
    tokens = t.prometheus_series(next(s for s in t.INSTRUMENTS if s.name == t.METRIC_TOKENS))[0]
    kind = t.prometheus_label(t.ATTR_TOKEN_KIND)
    assert any(tokens in e and f"by ({kind})" in e for e in exprs), "tokens by kind"
    assert any(f'{kind}="cache_read"' in e and "/" in e for e in exprs), "exact read ratio"


def test_traceql_queries_name_hango_spans() -> None:
    spans = {v for k, v in vars(t).items() if k.startswith("SPAN_") and isinstance(v, str)}
    queries = [
        tgt["query"]
        for p in dashboard()["panels"]
        for tgt in p["targets"]
        if p["datasource"]["uid"] == "tempo"
    ]
    assert queries
    for query in queries:
        names = re.findall(r'name\s*=\s*"([^"]+)"', query)
        assert names and set(names) <= spans, query


# --- the dashboard tells the truth ------------------------------------------------------------
def _panel(title_start: str) -> dict[str, Any]:
    return next(p for p in dashboard()["panels"] if p["title"].startswith(title_start))


def test_no_gauge_is_summed_as_a_rate() -> None:
    """A gauge is a level: rate() or increase() of it is nonsense (the invalid-skills panel once
    summed a rate of a per-run count and showed 9.36 for one bad file)."""
    gauges = {s for spec in t.INSTRUMENTS if spec.kind == "gauge" for s in t.prometheus_series(spec)}
    for expr in prom_targets():
        for inner in re.findall(r"(?:rate|increase|irate|delta)\(([^()]*)\)", expr):
            names, _, _ = parse_promql(inner)
            assert not names & gauges, f"{expr}: a gauge inside a rate"


def test_invalid_skills_panel_shows_the_latest_runs_files() -> None:
    (target,) = _panel("Invalid SKILL.md")["targets"]
    names, _, _ = parse_promql(target["expr"])
    assert names == {t.prometheus_name(t.METRIC_SKILLS_INVALID, "{skill}", "gauge")}
    assert target["expr"].startswith("max(")


def test_the_cache_miss_panel_says_why_in_the_views_words() -> None:
    """The dashboard's key of reasons is the one renderer's (hango.models.view.MISS_REASONS)."""
    from hango.models.view import MISS_REASONS, miss_legend

    panel = _panel("Why the cache read nothing")
    assert panel["description"].endswith("\n" + miss_legend())
    assert all(f"{reason}: " in panel["description"] for reason in MISS_REASONS)
    (target,) = panel["targets"]
    label = t.prometheus_label(t.ATTR_CACHE_MISS_REASON)
    assert f"by ({label})" in target["expr"] and "hango_cache_misses_total" in target["expr"]
    assert target["legendFormat"] == "{{" + label + "}}"


def test_memory_panel_says_which_figure_is_an_estimate() -> None:
    legends = [tgt["legendFormat"] for tgt in _panel("Memory injected per run")["targets"]]
    assert legends == ["mean", "p95 (bucket estimate)"]
