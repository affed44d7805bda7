"""Read a SKILL.md frontmatter and check it against the skill schema.

A frontmatter is a fixed schema (``name``, ``description``, a tools key, a one-level ``metadata``
map) written in the slice of YAML that :mod:`hango.agent.yaml_slice` reads: values as PyYAML
(``yaml.safe_load``) reads them, anything else *rejected* with a line and a reason. A rejected
skill is skipped with a warning, while a misread description or tools list would change what
the agent does. ``tests/test_frontmatter*.py`` check this against PyYAML and 92 real files.

Only the first :data:`HEAD_BYTES` bytes are read. The YAML text is the lines between the two
``---`` lines with no newline after the last one (as deepagents cuts it), so a block scalar that
is the last value has no final newline.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from hango.agent.yaml_slice import Entries, Node, SliceError, clip, read

__all__ = ["DESCRIPTION_MAX", "FENCES", "HEAD_BYTES", "NAME_MAX", "Frontmatter", "FrontmatterError",
           "naming_rule_problem", "parse", "split_tools"]

HEAD_BYTES = 16384  # the longest real frontmatter is ~1.2 KB; a 1024-character description <= 4 KB
# A line that is exactly ``---`` closes the frontmatter: a head is cut right after the first one.
# With HEAD_BYTES, the one definition of a skill's head (the schema's ``skill_head`` column cuts
# the same bytes at write time; a test holds the two together).
FENCES = (b"\n---\n", b"\n---\r\n")
NAME_MAX = 64
DESCRIPTION_MAX = 1024


class FrontmatterError(SliceError):
    """The frontmatter cannot be read or breaks a rule. ``line`` counts from the opening ``---``
    (line 1), or is ``None`` when no single line is at fault (a missing key)."""


@dataclass(frozen=True)
class Frontmatter:
    """What hango reads from a SKILL.md frontmatter."""

    name: str
    description: str
    allowed_tools: tuple[str, ...] | None  # None: no tools key ("no narrowing"); (): no tools
    metadata: Mapping[str, str] | None = field(default=None, hash=False)  # read-only
    keys: tuple[str, ...] = ()  # every top-level key, in file order
    warnings: tuple[str, ...] = ()


def parse(head: str | bytes) -> Frontmatter:
    """Read the frontmatter at the start of ``head`` (``str`` or UTF-8 ``bytes``). Raises only
    :class:`FrontmatterError`, an internal failure included: one odd file never breaks the loader."""
    try:
        return _schema(read(_lines(head)))
    except FrontmatterError:
        raise
    except SliceError as exc:
        raise FrontmatterError(exc.reason, exc.line) from None
    except Exception as exc:  # the contract is "only FrontmatterError"
        raise FrontmatterError(f"internal error while reading frontmatter: {exc!r}") from exc


# --- the head: bytes in, the frontmatter's lines out -------------------------------------------

_MARKER = re.compile(rb"---[ \t]*\r?(?:\n|\Z)")
# What PyYAML refuses to read, and the line breaks other than "\n" (a bare CR, NEL, LS, PS).
_UNREADABLE = re.compile("[^\t\n\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]|[\u2028\u2029]")
_TAB_INDENT = re.compile(r"^ *\t", re.M)


def _lines(head: object) -> list[str]:
    """The lines between the ``---`` lines; line ``i`` is line ``i + 2`` of the file. Only the first
    HEAD_BYTES are touched. A head within 3 bytes of that may end inside a line (or inside a
    character a caller dropped when decoding), so its last line is not trusted."""
    if isinstance(head, str):
        data = head[:HEAD_BYTES].encode("utf-8", "surrogatepass")[:HEAD_BYTES]
    elif isinstance(head, (bytes, bytearray, memoryview)):
        data = bytes(head[:HEAD_BYTES])
    else:
        raise FrontmatterError(f"expected str or bytes, got {type(head).__name__}")
    cut = len(data) > HEAD_BYTES - 4
    if cut:
        data = data[: data.rfind(b"\n") + 1]
    opening = _MARKER.match(data, 3 if data.startswith(b"\xef\xbb\xbf") else 0)
    if opening is None:
        raise FrontmatterError("no frontmatter: the file must start with a '---' line", 1)
    close = opening.end() - 1  # from the "\n" that ends the opening line
    while (close := data.find(b"\n---", close)) >= 0 and not _MARKER.match(data, close + 1):
        close += 1
    if close < 0:
        where = f"within the first {HEAD_BYTES} bytes" if cut else "no closing '---' line"
        raise FrontmatterError(f"frontmatter not closed{' ' if cut else ': '}{where}", 1)
    raw = data[opening.end() : max(opening.end(), close)]
    try:
        text = raw.decode("utf-8").removesuffix("\r").replace("\r\n", "\n")
    except UnicodeDecodeError as exc:
        raise FrontmatterError("not valid UTF-8", raw.count(b"\n", 0, exc.start) + 2) from None
    printable = text.replace("\n", "").replace("\t", "").isprintable()  # then all is readable
    if not printable and (bad := _UNREADABLE.search(text)):
        raise FrontmatterError(f"unsupported character U+{ord(bad.group()):04X}",
                               text.count("\n", 0, bad.start()) + 2)
    if "\t" in text and (bad := _TAB_INDENT.search(text)):
        raise FrontmatterError("tab in indentation; indent with spaces", text.count("\n", 0, bad.start()) + 2)
    return text.split("\n")


# --- the schema --------------------------------------------------------------------------------

_TOOL_KEYS = ("allowed-tools", "allowed_tools")
_KNOWN = frozenset(("name", "description", "metadata", "license", "compatibility", *_TOOL_KEYS))
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SPEC_NAME = re.compile(r"[^\W_]+(?:-[^\W_]+)*")  # letters and digits, single inner hyphens
_TOOL = re.compile(r"(?:[^\s,()]|\([^()]*\))+")  # a tool name, maybe with one (pattern)


def _string(node: Node, what: str, line: int) -> str:
    """A value hango needs as a string; anything else is a reason to reject."""
    if not isinstance(node, tuple):
        kind = "list" if isinstance(node, list) else "mapping"
        raise FrontmatterError(f"'{what}' must be a string, not a {kind}", line)
    if node[0] != "str":
        raise FrontmatterError(f"'{what}' has no value" if node[0] == "null" else
                               f"'{what}': YAML reads {clip(node[1])!r} as a {node[0]}, not a string; "
                               "quote it", line)
    return node[1]


def _schema(entries: Entries) -> Frontmatter:
    """Check the map against hango's schema: name 1..64 printable characters (the Agent Skills
    naming rule only warns); description 1..1024 characters, no control characters but newline
    and tab; ``license`` and ``compatibility`` ignored, other keys ignored with a warning."""
    for required in ("name", "description"):
        if required not in entries:
            raise FrontmatterError(f"missing required key '{required}'")
    line, node = entries["name"]
    name = _string(node, "name", line)
    if not 1 <= len(name) <= NAME_MAX:
        raise FrontmatterError(f"name is {len(name)} characters; it must be 1..{NAME_MAX}", line)
    if not name.isprintable():
        raise FrontmatterError("name must be one line of printable characters", line)
    warnings = [f"line {line}: {problem}"] if (problem := naming_rule_problem(name)) else []
    warnings += [f"line {n}: key '{k}' is not used by hango; ignored"
                 for k, (n, _) in entries.items() if k not in _KNOWN]
    line, node = entries["description"]
    description = _string(node, "description", line)
    if not description.strip():
        raise FrontmatterError("description is empty", line)
    if len(description) > DESCRIPTION_MAX:
        raise FrontmatterError(f"description is {len(description)} characters; the limit is "
                               f"{DESCRIPTION_MAX}", line)
    if not description.isprintable() and _CONTROL.search(description):
        raise FrontmatterError("description contains control characters", line)
    return Frontmatter(name, description, _tools(entries), _metadata(entries.get("metadata")),
                       tuple(entries), tuple(warnings))


def naming_rule_problem(name: str) -> str | None:
    """Why ``name`` breaks the Agent Skills naming rule, or None. hango only warns (published
    skills such as ``code_explorer`` break it); ``hango skills check`` reports it."""
    if name == name.lower() and _SPEC_NAME.fullmatch(name):
        return None
    return (f"name '{name}' breaks the Agent Skills naming rule (lowercase letters, digits and "
            "single inner hyphens)")


def _tools(entries: Entries) -> tuple[str, ...] | None:
    """The tools under ``allowed-tools`` (the spec's key) or ``allowed_tools`` (hango's), not both:
    a list, or a string split as :func:`split_tools` does. None when neither key is present."""
    if not (keys := [key for key in _TOOL_KEYS if key in entries]):
        return None
    if len(keys) > 1:
        raise FrontmatterError("both 'allowed-tools' and 'allowed_tools' given; keep one",
                               max(entries[key][0] for key in keys))
    key, (line, node) = keys[0], entries[keys[0]]
    if isinstance(node, tuple) and node[0] == "null":
        raise FrontmatterError(f"'{key}' has no value; write [] for none or drop the key", line)
    if isinstance(node, list):
        tools = tuple(_string(item, f"{key} item", item[2]) for item in node)
    else:
        tools = split_tools(_string(node, key, line), line)
    for tool in tools:
        if not tool.strip():
            raise FrontmatterError(f"'{key}' has an empty item", line)
        if tool.startswith("("):  # "(read_file, ls)": a list written in parentheses
            names = clip(" ".join(re.findall(r"[^\s,()]+", tool)))
            raise FrontmatterError(f"'{key}': {clip(tool)!r} is not a tool name (parentheses follow a "
                                   "tool name, as in Bash(git:*)); to list tools, separate them "
                                   f"with spaces: {key}: {names}", line)
    return tools


def split_tools(text: str, line: int | None = None) -> tuple[str, ...]:
    """Split a tools string on whitespace and commas outside parentheses: ``"Bash(git log:*)
    Read, Grep"`` gives ``("Bash(git log:*)", "Read", "Grep")``. The Agent Skills spec writes a
    space-separated string; deepagents also splits on commas."""
    if re.search("[()]", _TOOL.sub("", text)):
        raise FrontmatterError("unbalanced or nested parentheses in the tools", line)
    return tuple(_TOOL.findall(text))


def _metadata(entry: tuple[int, Node] | None) -> Mapping[str, str] | None:
    """The ``metadata`` map of strings (read-only); None when absent or null."""
    if entry is None or (isinstance(entry[1], tuple) and entry[1][0] == "null"):
        return None
    if not isinstance(entry[1], dict):
        raise FrontmatterError("'metadata' must be a mapping of strings", entry[0])
    return MappingProxyType({k: _string(v, f"metadata.{k}", n) for k, (n, v) in entry[1].items()})
