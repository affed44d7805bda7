"""Path rules for the one filesystem, and the reserved prefixes ``/memories/`` and ``/skills/``.

Memory and skills are not subsystems: they are files under two reserved prefixes. There is no
router (no ``CompositeBackend``): one backend, and this module decides what a path is and who may
write where. Both doors (the files API and the agent's tools) call :func:`check_write`.

A path is *rejected*, never *resolved*: resolving ``/notes/../memories/AGENTS.md`` is exactly how a
write slips past a prefix check, so a ``..`` segment is an error, not something to normalise.
"""

from __future__ import annotations

import unicodedata
from typing import ClassVar, Literal, get_args

from hango.errors import HangoError

PREFIX_MEMORIES = "/memories/"
PREFIX_SKILLS = "/skills/"
RESERVED_PREFIXES = (PREFIX_MEMORIES, PREFIX_SKILLS)
MAX_PATH_BYTES = 1024
MAX_SEGMENT_BYTES = 255

# The roles, spelled once: a token has one; owners and admins write the reserved prefixes,
# decide proposals and configure agents; only an owner manages tokens.
Role = Literal["owner", "admin", "member"]
ROLES: tuple[str, ...] = get_args(Role)
OWNER = "owner"
WRITERS: frozenset[str] = frozenset({OWNER, "admin"})


class PathError(HangoError, ValueError):
    """A path breaks one of the rules; the message names the rule."""

    status: ClassVar[int] = 422

    def __init__(self, path: object, rule: str) -> None:
        super().__init__(f"invalid path {path!r}: {rule}")
        self.path = path
        self.rule = rule


class ReservedPathError(HangoError, PermissionError):
    """A write under a reserved prefix by someone who may not write there."""

    status: ClassVar[int] = 403

    def __init__(self, path: str, prefix: str, who: str) -> None:
        super().__init__(
            f"{path!r} is under the reserved prefix {prefix}: only an owner or admin may write "
            f"there, and only through the files API ({who} may not)"
        )
        self.path = path
        self.prefix = prefix


class ApprovalRequired(PermissionError):
    """An agent's write under a reserved prefix in ``ask`` mode: not done, but proposed.

    The agent's tools turn it into a proposal an owner or admin decides (hango.agent.proposals).
    """

    def __init__(self, path: str, prefix: str) -> None:
        super().__init__(f"{path!r} is under the reserved prefix {prefix}: the write becomes a "
                         "proposal that an owner or admin approves or rejects")
        self.path = path
        self.prefix = prefix


def _check_chars(path: str) -> None:
    for ch in path:
        category = unicodedata.category(ch)
        if category == "Cc":
            raise PathError(path, f"control character U+{ord(ch):04X} is not allowed")
        if category in ("Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            # Format (zero-width, bidi overrides), surrogates, private/unassigned, line separators:
            # invisible characters make two different paths look the same to a human.
            raise PathError(path, f"invisible or unassigned character U+{ord(ch):04X}")
    if "\\" in path:
        raise PathError(path, "backslash is not allowed (use /)")


def _segments(path: object, *, directory: bool) -> list[str]:
    if not isinstance(path, str):
        raise PathError(path, "must be a string")
    if not path.startswith("/"):
        raise PathError(path, "must be absolute (start with /)")
    _check_chars(path)
    if len(path.encode("utf-8")) > MAX_PATH_BYTES:
        raise PathError(path, f"longer than {MAX_PATH_BYTES} bytes")
    body = path[1:]
    if directory and body.endswith("/"):
        body = body[:-1]
        if body == "":  # "//": the root spelled with an empty segment
            raise PathError(path, "empty segment (//) is not allowed")
    elif not directory and (path == "/" or body.endswith("/")):
        raise PathError(path, "a file path must not end with /")
    if directory and body == "":
        return []
    segments = body.split("/")
    for segment in segments:
        if segment == "":
            raise PathError(path, "empty segment (//) is not allowed")
        if segment in (".", ".."):
            raise PathError(path, f"'{segment}' segment is not allowed (paths are never resolved)")
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            raise PathError(path, f"a segment is longer than {MAX_SEGMENT_BYTES} bytes")
    return segments


def clean(path: object) -> str:
    """Return ``path`` if it is a valid absolute file path, else raise :class:`PathError`."""
    _segments(path, directory=False)
    assert isinstance(path, str)
    return path


def clean_dir(path: object) -> str:
    """Return a valid directory path, always ending with ``/`` (``/`` itself is the root)."""
    segments = _segments(path, directory=True)
    return "/" + "".join(s + "/" for s in segments)


def is_reserved(path: str) -> bool:
    """True when a *cleaned* path lies under ``/memories/`` or ``/skills/``."""
    return reserved_prefix(path) is not None


def reserved_prefix(path: str) -> str | None:
    for prefix in RESERVED_PREFIXES:
        if path.startswith(prefix) or path + "/" == prefix:
            return prefix
    return None


def check_write(path: str, role: str | None, reserved_writes: str = "refuse") -> str:
    """The one write rule, called by the files API and by the agent's tools.

    ``role`` is the API principal's role, or ``None`` for the agent itself. Returns the cleaned
    path; raises :class:`PathError` or :class:`ReservedPathError`. ``reserved_writes`` is the
    agent's mode: with ``"ask"``, the agent's write under a reserved prefix raises
    :class:`ApprovalRequired` instead (a proposal, never a write); it changes nothing for a
    principal of the API.
    """
    cleaned = clean(path)
    prefix = reserved_prefix(cleaned)
    if prefix is not None and role not in WRITERS:
        if role is None and reserved_writes == "ask":
            raise ApprovalRequired(cleaned, prefix)
        raise ReservedPathError(cleaned, prefix, "the agent" if role is None else f"a {role}")
    return cleaned


def validate_source(value: object, prefix: str) -> str:
    """A memory or skills source from an agent's config: absolute, clean, under ``prefix``.

    Memory sources are files (``/memories/AGENTS.md``); skills sources are directories
    (``/skills/`` or ``/skills/team/``), returned with a trailing ``/``.
    """
    cleaned = clean_dir(value) if prefix == PREFIX_SKILLS else clean(value)
    if not cleaned.startswith(prefix):
        raise PathError(value, f"must be under {prefix}")
    return cleaned
