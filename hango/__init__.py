"""hango: long-term memory and skills for an LLM agent runtime, as files in PostgreSQL.

The facade: the names a learner or a notebook uses, importable from ``hango`` itself::

    from hango import AgentConfig, SimulatedModel, start, tool_call

Each lives in the module of its concept (listed in ``_WHERE``; the docs and tracebacks name
that module), and is imported from there on first use: ``import hango`` stays cheap (no
database driver, web framework or OpenTelemetry SDK), which matters to ``hango --help`` and to
every process that imports one small part of the package.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and editors see; at run time, __getattr__ below
    from hango.agent.runtime import Agent, RunResult
    from hango.agents import AgentConfig, create_tenant, create_token, save_agent
    from hango.api.client import ApiError, FilesClient
    from hango.db import Database, get_database
    from hango.exercises import check
    from hango.exercises.progress import progress
    from hango.fs.backend import PostgresBackend
    from hango.models.simulated import SimulatedModel, tool_call
    from hango.notebook import show_index, show_request, show_usage, show_warnings, start
    from hango.pictures import draw_request
    from hango.settings import Settings, load_settings
    from hango.telemetry import Telemetry, configure

_WHERE: dict[str, str] = {
    # a run: the agent, its config, a scripted model
    "Agent": "hango.agent.runtime",
    "RunResult": "hango.agent.runtime",
    "AgentConfig": "hango.agents",
    "SimulatedModel": "hango.models.simulated",
    "tool_call": "hango.models.simulated",
    # tenants, tokens, agents, files
    "create_tenant": "hango.agents",
    "create_token": "hango.agents",
    "save_agent": "hango.agents",
    "Database": "hango.db",
    "get_database": "hango.db",
    "PostgresBackend": "hango.fs.backend",
    "FilesClient": "hango.api.client",
    "ApiError": "hango.api.client",
    # settings and telemetry
    "Settings": "hango.settings",
    "load_settings": "hango.settings",
    "Telemetry": "hango.telemetry",
    "configure": "hango.telemetry",
    # the notebooks' course and displays (draw_request imports matplotlib only when called)
    "start": "hango.notebook",
    "show_request": "hango.notebook",
    "show_index": "hango.notebook",
    "show_usage": "hango.notebook",
    "show_warnings": "hango.notebook",
    "draw_request": "hango.pictures",
    # the exercises: check one, and see what is passed and what is next
    "check": "hango.exercises",
    "progress": "hango.exercises",
}

__all__ = [
    "Agent", "AgentConfig", "ApiError", "Database", "FilesClient", "PostgresBackend",
    "RunResult", "Settings", "SimulatedModel", "Telemetry", "check", "configure", "create_tenant",
    "create_token", "draw_request", "get_database", "load_settings", "progress", "save_agent",
    "show_index", "show_request", "show_usage", "show_warnings", "start", "tool_call",
]


def __getattr__(name: str) -> Any:
    """``hango.Agent`` and the rest of ``__all__``: imported from their module on first use."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'hango' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # once found, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
