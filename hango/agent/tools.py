"""The agent's filesystem tools: read_file, write_file, edit_file, ls, glob.

They work in the run's namespace ``{tenant_id, agent_id}``. There is no memory tool: the agent
edits memory the way it edits any file, and writes under ``/memories/`` and ``/skills/`` are
refused by :func:`hango.fs.path.check_write`, the same rule the files API calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from hango.agent.hooks import RunContext, Tool, ToolCallNext
from hango.agent.proposing import propose
from hango.fs.path import ApprovalRequired, check_write
from hango.models.base import ToolCall, ToolResult, ToolSpec

READ_LIMIT = 256 * 1024  # bytes a single read_file returns; the rest is announced, not sent
LIST_LIMIT = 200  # entries a single ls or glob returns; more are announced, with how to narrow


def _str(args: dict[str, Any], key: str, default: str | None = None) -> str:
    value = args.get(key, default)
    if not isinstance(value, str):
        raise ValueError(f"argument {key!r} must be a string")
    return value


def read_file(ctx: RunContext, args: dict[str, Any]) -> str:
    path = _str(args, "path")
    data = ctx.backend.read(path, limit=READ_LIMIT)
    if data.truncated:
        return data.content + f"\n[... truncated: {data.size} bytes in all, {READ_LIMIT} shown]"
    return data.content


def write_file(ctx: RunContext, args: dict[str, Any]) -> str:
    path = check_write(_str(args, "path"), role=None)
    version = ctx.backend.write(path, _str(args, "content"))
    return f"wrote {path} (version {version})"


def edit_file(ctx: RunContext, args: dict[str, Any]) -> str:
    path = check_write(_str(args, "path"), role=None)
    replace_all = args.get("replace_all", False)
    if not isinstance(replace_all, bool):
        raise ValueError("argument 'replace_all' must be true or false")
    version = ctx.backend.edit(path, _str(args, "old_string"), _str(args, "new_string"),
                               replace_all=replace_all)
    return f"edited {path} (version {version})"


def _more(shown: int, more: bool, narrow: str) -> str:
    return f"\n[... {shown} shown and more exist: {narrow}]" if more else ""


def ls(ctx: RunContext, args: dict[str, Any]) -> str:
    path = _str(args, "path", "/")
    page = ctx.backend.ls(path, limit=LIST_LIMIT)
    lines = "\n".join(e.path if e.is_dir else f"{e.path} ({e.size} bytes)" for e in page)
    return (lines or "(empty)") + _more(
        len(page), page.next_cursor is not None,
        f"list a subdirectory, or glob a narrower pattern such as {path.rstrip('/')}/a*")


def glob(ctx: RunContext, args: dict[str, Any]) -> str:
    page = ctx.backend.glob(_str(args, "pattern"), limit=LIST_LIMIT)
    return ("\n".join(page) or "(no match)") + _more(
        len(page), page.next_cursor is not None,
        "narrow the pattern, best with a longer literal directory before the first wildcard")


def _spec(name: str, description: str, **props: str) -> ToolSpec:
    required = [k for k in props if not k.endswith("_opt")]
    properties: dict[str, Any] = {}
    for key, kind in props.items():
        properties[key.removesuffix("_opt")] = {"type": kind}
    return ToolSpec(name, description, {"type": "object", "properties": properties,
                                        "required": required})


FILESYSTEM_TOOLS: tuple[Tool, ...] = (
    Tool(_spec("read_file", "Read a file of your filesystem by absolute path.", path="string"),
         read_file),
    Tool(_spec("write_file", "Create or replace a file. /memories/ and /skills/ are read-only "
               "for the agent.", path="string", content="string"), write_file,
         writes_files=True),
    Tool(_spec("edit_file", "Replace an exact, unique piece of text in a file.", path="string",
               old_string="string", new_string="string", replace_all_opt="boolean"), edit_file,
         writes_files=True),
    Tool(_spec("ls", "List a directory.", path_opt="string"), ls),
    Tool(_spec("glob", "Find files by pattern, e.g. /skills/**/SKILL.md.", pattern="string"),
         glob),
)


ASK_NOTE = (" In this agent, a write under /memories/ or /skills/ becomes a proposal: the run "
            "pauses until an owner or admin approves or rejects it, and you get the decision.")


class FilesystemMiddleware:
    """Provides the filesystem tools (the allowlist still decides which may be called).

    In ``ask`` mode it also turns a write under a reserved prefix into a proposal: the one rule
    (:func:`check_write`) says ``ApprovalRequired``, and the call raises an ``Interrupt`` instead
    of running (see :mod:`hango.agent.proposals`).
    """

    name = "filesystem"

    def __init__(self, max_pending: int = 20, max_bytes: int = 1024 * 1024,
                 max_pending_per_member: int = 5) -> None:
        self.max_pending = max_pending
        self.max_bytes = max_bytes
        self.max_pending_per_member = max_pending_per_member

    def tools(self, ctx: RunContext) -> Sequence[Tool]:
        if ctx.config.reserved_writes != "ask":
            return FILESYSTEM_TOOLS
        return tuple(replace(t, spec=ToolSpec(t.spec.name, t.spec.description + ASK_NOTE,
                                              t.spec.parameters))
                     if t.spec.name in ("write_file", "edit_file") else t
                     for t in FILESYSTEM_TOOLS)

    def wrap_tool_call(self, ctx: RunContext, call: ToolCall, call_next: ToolCallNext) -> ToolResult:
        path = call.arguments.get("path")
        if (call.name in ("write_file", "edit_file") and ctx.config.reserved_writes == "ask"
                and isinstance(path, str)):
            try:
                check_write(path, role=None, reserved_writes="ask")
            except ApprovalRequired as exc:
                try:
                    raise propose(ctx, call, exc.path, max_bytes=self.max_bytes,
                                  max_pending=self.max_pending,
                                  max_pending_per_member=self.max_pending_per_member) from None
                except (ValueError, LookupError) as error:  # the model's to read and fix
                    return ToolResult(call.id, f"error: {error}", is_error=True)
            except ValueError:
                pass  # a bad path: the tool itself refuses it, naming the rule
        return call_next(call)
