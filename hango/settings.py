"""Every ``HANGO_*`` variable in one place, with the seed's defaults.

Lists (``HANGO_MEMORY_DEFAULT_SOURCES``, ``HANGO_SKILLS_DEFAULT_SOURCES``) are written
comma-separated (``/memories/AGENTS.md,/memories/team.md``) or as a JSON list. A bad value is
refused with an error that names the variable, never silently replaced by a default.

This module owns the shape of each value and imports nothing from hango. A default source must
lie under its reserved prefix; the other path rules (characters, lengths, ``..`` segments) are
hango/fs/path.py's: ``hango.agents.check_default_sources`` applies them (the CLI before any
command, the files API before serving, ``default_stack`` before a run).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

ENV_PREFIX = "HANGO_"

# The reserved prefixes of hango/fs/path.py, as the shape of the two source lists (a test keeps
# the spellings equal): memory sources are files under /memories/, skills sources directories
# under /skills/ (``/skills`` itself included).
SOURCE_PREFIXES = {"memory_default_sources": "/memories/", "skills_default_sources": "/skills/"}


MAX_WORKERS = 64  # processes of `hango serve`, from HANGO_WORKERS or --workers


class SettingsError(ValueError):
    """A HANGO_* variable has a value hango cannot use."""


def _split_list(value: object) -> object:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


class Settings(BaseModel):
    """Tenant-level defaults and where hango finds its database and serves its API: each field
    from its ``HANGO_*`` variable (any case), unless given; a variable hango does not know is
    ignored. The variables are read here, with no settings library: a run imports only this."""

    model_config = ConfigDict(extra="ignore", validate_default=True)

    database_url: str | None = Field(
        default=None,
        description="Any PostgreSQL server; unset means the embedded server from the wheel.",
    )
    database_name: str | None = Field(
        default=None, pattern=r"^[a-z_][a-z0-9_]{0,62}$",
        description="The database, when not the URL's (unset: the URL's, else hango).")
    # Which pooler is in front of the server (HANGO_DATABASE_URL): `transaction` turns psycopg's
    # automatic prepared statements off (a prepared statement lives on one server connection,
    # which a transaction-mode pooler hands to any client). `none` and `session`: they stay on.
    database_pooler: Literal["none", "session", "transaction"] = "none"
    # The connection budget of one process: a pool for worker threads, one for the event loop
    # (the files API's plain GET), each opened with one connection and grown on demand.
    database_pool_size: int = Field(default=4, ge=1, le=100)
    database_loop_pool_size: int = Field(default=2, ge=1, le=100)
    database_pool_timeout: float = Field(default=5.0, gt=0, le=600)
    data_dir: Path | None = Field(
        default=None, description="Where the embedded server keeps its data (default: ./.hango)."
    )
    memory_default_sources: list[str] = ["/memories/AGENTS.md"]
    memory_max_bytes: int = Field(default=65536, ge=1, le=16 * 1024 * 1024)
    skills_default_sources: list[str] = ["/skills/"]
    skills_max: int = Field(default=100, ge=1, le=100_000)
    # Bytes of the rendered skills index (header, one line per skill, footer). Claude Code's
    # budget for skill descriptions is "1% of the context window, with a fallback of 8,000
    # characters", earlier "2% / 16,000" (notes/skills-and-memory-conventions.md §2.5); 16 KiB is
    # about 4,000 tokens, 2% of a 200k-token window. See hango/agent/skills.py.
    skills_index_max_bytes: int = Field(default=16 * 1024, ge=1024, le=1024 * 1024)
    # How many levels of subagents below the agent a run starts with (a -> b is depth 1).
    subagent_max_depth: int = Field(default=3, ge=0, le=16)
    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=1, le=65535)
    # Processes of `hango serve` (uvicorn workers on one socket): runs are Python, and one
    # process runs Python on one core at a time (bench/workshop.py).
    workers: int = Field(default=1, ge=1, le=MAX_WORKERS)
    max_body_bytes: int = Field(default=1024 * 1024, ge=1)
    cache_prefix_ttl: Literal["5m", "1h"] = Field(
        default="1h",
        description="TTL of the cached stable prefix (tools, base prompt, skills index); "
        "see hango/agent/promptcache.py and bench/cache_ratio.py.",
    )
    # Bounds: no door makes a file larger than this; listings come in pages; and
    # each tenant has a quota of files and bytes, enforced by the database (schema/20-integrity.sql).
    max_file_bytes: int = Field(default=16 * 1024 * 1024, ge=1, le=1024 * 1024 * 1024)
    list_page_default: int = Field(default=1000, ge=1, le=100_000)
    list_page_max: int = Field(default=10_000, ge=1, le=100_000)
    glob_scan_max: int = Field(default=20_000, ge=1, le=10_000_000)
    tenant_max_files: int = Field(default=100_000, ge=1)
    tenant_max_bytes: int = Field(default=1024 * 1024 * 1024, ge=1)
    # Agent-written memory: the tenant default for agents whose config names none.
    reserved_writes: Literal["refuse", "ask"] = Field(
        default="refuse", description="An agent's write under /memories/ or /skills/: refused, "
        "or a proposal an owner or admin decides.")
    proposals_max_pending: int = Field(default=20, ge=1, le=10_000)
    # A member's runs may hold at most this many of an agent's pending proposals, so that one
    # member cannot fill the queue for everyone (owners, admins and runs started in code: only
    # the agent's bound above).
    proposals_max_pending_per_member: int = Field(default=5, ge=1, le=10_000)
    model: str = Field(default="hango-sim-1", min_length=1, description="The model of runs over "
                       "HTTP: hango-sim-1 (offline), a claude-* name (needs the anthropic extra "
                       "and ANTHROPIC_API_KEY) or openai:<model> (the openai extra; the server "
                       "is OPENAI_BASE_URL, the key OPENAI_API_KEY).")
    run_max_seconds: float = Field(default=120.0, gt=0, le=3600)
    learner: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9._@-]{1,64}$",
        description="Whose exercise progress check() records and progress() shows (default: "
        "the login name); see hango/exercises/progress.py.")
    # A workshop's shared server (docs/workshop.md): the notebooks send their checks there, and
    # a notebook that talks to its agent only over HTTP (09) runs it there, in the learner's seat
    # (the tenant of HANGO_TOKEN, an owner token of `hango workshop provision`).
    server_url: str | None = Field(
        default=None, pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$",
        description="The shared server, such as http://192.168.1.20:8765 (unset: none).")
    token: str | None = Field(default=None, pattern=r"^hango_[A-Za-z0-9_-]{16,200}$", repr=False,
                              description="The learner's token for it (and for `hango files`).")
    # A resume's claim on a run lasts this long and is renewed every third of it while the resume
    # runs; the claim of a resume whose process died expires after at most this long.
    run_lease_seconds: float = Field(default=30.0, ge=0.1, le=3600)
    # One budget for a run and all its subagents' runs (hango/agent/hooks.py Budget): the
    # deadline above and this many model calls; and at most this many task calls in one turn.
    run_max_model_calls: int = Field(default=100, ge=1, le=100_000)
    subagent_max_tasks_per_turn: int = Field(default=4, ge=1, le=1000)
    # Retention of runs and their proposals (hango/retention.py): ended runs older than this or
    # beyond this many per tenant are deleted by a sweep, which `hango serve` runs this often
    # (0: never; `hango db sweep` runs one).
    runs_keep_days: float = Field(default=30.0, gt=0, le=36500)
    runs_keep_max: int = Field(default=10_000, ge=1, le=10_000_000)
    runs_sweep_seconds: float = Field(default=300.0, ge=0, le=86400)
    # Runs over HTTP (hango/api/run_limits.py), per server process: the threads runs wait on
    # their model in (the file routes keep anyio's default threads), and how many runs one
    # tenant may have in progress at once (one more is 429).
    run_threads: int = Field(default=32, ge=1, le=1024)
    tenant_max_runs: int = Field(default=8, ge=1, le=1024)
    # Memory history (hango/fs/history.py): the earlier versions kept of each file under
    # /memories/ and /skills/, counted in the tenant's bytes quota; and the prompts a run over
    # HTTP keeps, in bytes, counted in its run_bytes (hango/prompts.py).
    history_max_versions: int = Field(default=20, ge=1, le=1000)
    run_prompt_max_bytes: int = Field(default=256 * 1024, ge=0, le=64 * 1024 * 1024)

    @model_validator(mode="before")
    @classmethod
    def _environment(cls, given: object) -> object:
        """The ``HANGO_*`` variables, as text (a field's own type reads it), under what was
        given."""
        if not isinstance(given, dict):
            return given
        found = {name[len(ENV_PREFIX):].lower(): value for name, value in os.environ.items()
                 if name.upper().startswith(ENV_PREFIX)}
        return {**{k: v for k, v in found.items() if k in cls.model_fields}, **given}

    @field_validator("memory_default_sources", "skills_default_sources", mode="before")
    @classmethod
    def _lists(cls, value: object) -> object:
        return _split_list(value)

    @field_validator("memory_default_sources")
    @classmethod
    def _memory_files(cls, value: list[str]) -> list[str]:
        prefix = SOURCE_PREFIXES["memory_default_sources"]
        for entry in value:
            if not entry.startswith(prefix) or entry.endswith("/"):
                raise ValueError(f"{entry!r} is not a file under {prefix}")
        return value

    @field_validator("skills_default_sources")
    @classmethod
    def _skills_directories(cls, value: list[str]) -> list[str]:
        prefix = SOURCE_PREFIXES["skills_default_sources"]
        for entry in value:
            if not (entry + "/").startswith(prefix):
                raise ValueError(f"{entry!r} is not a directory under {prefix}")
        return value


def load_settings(**overrides: object) -> Settings:
    """Read the environment (plus ``overrides``); raise :class:`SettingsError` naming the variable."""
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else "?"
            problems.append(f"HANGO_{field.upper()}: {err['msg']} (got {err.get('input')!r})")
        raise SettingsError("; ".join(problems)) from None
    except json.JSONDecodeError as exc:
        raise SettingsError(f"a HANGO_* list variable is not valid JSON: {exc}") from None
    return settings


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return load_settings()
