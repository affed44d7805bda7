"""An agent's config: what it may do and what it remembers, validated the same at every door.

The config (in the ``agents`` table, :mod:`hango.agents`): its tool allowlist, its memory
sources and its skills sources, its subagents, its bound of steps and its reserved-writes mode.
What it leaves out (sources, the reserved-writes mode) comes from its tenant's defaults
(:class:`TenantDefaults`, set by an owner), else from the server's settings
(``HANGO_MEMORY_DEFAULT_SOURCES``, ``HANGO_SKILLS_DEFAULT_SOURCES``, ``HANGO_RESERVED_WRITES``).
Every source must be an absolute clean path under the matching reserved prefix; a bad entry is
refused naming it.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, WithJsonSchema, field_validator

from hango.fs.path import PREFIX_MEMORIES, PREFIX_SKILLS, PathError, validate_source
from hango.settings import Settings, SettingsError

ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
# The agent of the course: every notebook's, each workshop seat's, the README's curl lines.
COURSE_AGENT = "assistant"
TOOL_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"


# What the JSON Schema (the files API's OpenAPI) says of each entry; the validators below decide.
_NO_NUL = r"^[^\x00]*$"
ToolName = Annotated[str, WithJsonSchema({"type": "string", "pattern": TOOL_PATTERN})]
AgentRef = Annotated[str, WithJsonSchema({"type": "string", "pattern": ID_PATTERN})]
_SEGMENT = r"[^/\\\x00-\x1f\x7f-\x9f]+"  # necessary, not sufficient: fs.path has every rule
MemorySource = Annotated[str, WithJsonSchema(
    {"type": "string", "pattern": rf"^/memories/{_SEGMENT}(/{_SEGMENT})*$"})]
SkillsSource = Annotated[str, WithJsonSchema(
    {"type": "string", "pattern": rf"^/skills(/{_SEGMENT})*/?$"})]


class _Sources(BaseModel):
    """The one rule of memory and skills sources, for an agent's config and a tenant's defaults."""

    @field_validator("memory", "skills", check_fields=False)
    @classmethod
    def _sources(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        key = info.field_name or ""
        return _sources(value, PREFIX_MEMORIES if key == "memory" else PREFIX_SKILLS, key)


class AgentConfig(_Sources):
    """What an agent may do and what it remembers. ``None`` sources mean the tenant defaults."""

    model_config = ConfigDict(extra="forbid")

    system_prompt: str = Field(default="You are a helpful agent.", max_length=100_000,
                               json_schema_extra={"pattern": _NO_NUL})
    tools: list[ToolName] = Field(
        default_factory=lambda: ["read_file", "write_file", "edit_file", "ls", "glob"],
        description="The allowlist: the only tools this agent may ever call.",
    )
    memory: list[MemorySource] | None = Field(default=None, max_length=32)
    skills: list[SkillsSource] | None = Field(default=None, max_length=32)
    subagents: list[AgentRef] = Field(default_factory=list,
                                      description="Agents the task tool may run.")
    max_steps: int = Field(default=12, ge=1, le=200)
    reserved_writes: Literal["refuse", "ask"] | None = Field(
        default=None, description="An agent write under /memories/ or /skills/: refuse (only "
        "owners and admins write there, over the API) or ask (a proposal an owner or admin "
        "decides); none: the tenant default HANGO_RESERVED_WRITES.")

    @field_validator("system_prompt")
    @classmethod
    def _storable(cls, value: str, info: ValidationInfo) -> str:
        if "\x00" in value:  # jsonb cannot hold U+0000
            raise ValueError(f"{info.field_name} contains U+0000 (NUL), which cannot be stored")
        return value

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: list[str]) -> list[str]:
        for i, name in enumerate(value):
            if not re.fullmatch(TOOL_PATTERN, name):
                raise ValueError(f"tools[{i}] {name!r} is not a tool name")
        return list(dict.fromkeys(value))

    @field_validator("subagents")
    @classmethod
    def _subagents(cls, value: list[str], info: ValidationInfo) -> list[str]:
        # The config does not hold its own id: save_agent validates with context={"agent_id"}.
        me = (info.context or {}).get("agent_id")
        for i, name in enumerate(value):
            if not re.fullmatch(ID_PATTERN, name):
                raise ValueError(f"subagents[{i}] {name!r} is not an agent id")
            if name == me:
                raise ValueError(f"subagents[{i}] {name!r} is this agent itself; an agent "
                                 "cannot be its own subagent")
        return value

    def for_agent(self, agent_id: str) -> AgentConfig:
        """This config validated as agent ``agent_id``'s: refuses one that names itself a subagent.

        Raises pydantic's ``ValidationError`` (a ``ValueError``) naming ``subagents[i]``. Longer
        cycles (a -> b -> a) are legal configs; the ``task`` tool refuses them at run time.
        """
        return AgentConfig.model_validate(self.model_dump(), context={"agent_id": agent_id})


class TenantDefaults(_Sources):
    """A tenant's defaults, set by an owner: for its agents whose own config names none. A key
    left out (``None``) falls back to the server's ``HANGO_MEMORY_DEFAULT_SOURCES``,
    ``HANGO_SKILLS_DEFAULT_SOURCES``, ``HANGO_RESERVED_WRITES``. Validated as an agent's config."""

    model_config = ConfigDict(extra="forbid")

    memory: list[MemorySource] | None = Field(default=None, max_length=32)
    skills: list[SkillsSource] | None = Field(default=None, max_length=32)
    reserved_writes: Literal["refuse", "ask"] | None = None

    def apply(self, config: AgentConfig) -> AgentConfig:
        """``config`` with what it leaves out taken from these defaults (its own values win)."""
        mine = self.model_dump(exclude_none=True)
        fill = {key: value for key, value in mine.items() if getattr(config, key) is None}
        return config.model_copy(update=fill) if fill else config


def _sources(value: list[str] | None, prefix: str, key: str) -> list[str] | None:
    if value is None:
        return None
    out = []
    for i, entry in enumerate(value):
        try:
            out.append(validate_source(entry, prefix))
        except PathError as exc:
            raise ValueError(f"{key}[{i}] {entry!r}: {exc.rule}") from None
    return out


def check_default_sources(settings: Settings) -> Settings:
    """``settings`` if its tenant-default sources pass every path rule, else :class:`SettingsError`
    naming the variable (settings.py, which imports nothing from hango, checks only the prefix).
    The CLI calls it before any command, ``create_app`` before serving, ``default_stack`` before
    a run (a script's or a notebook's too)."""
    try:
        _sources(settings.memory_default_sources, PREFIX_MEMORIES, "HANGO_MEMORY_DEFAULT_SOURCES")
        _sources(settings.skills_default_sources, PREFIX_SKILLS, "HANGO_SKILLS_DEFAULT_SOURCES")
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    return settings
