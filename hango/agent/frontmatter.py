"""Read the frontmatter of a SKILL.md file: the slice of YAML real skills use, and no more.

The schema is fixed (``name``, ``description``, a tools key, a one-level ``metadata`` map) and
real files write it with plain, single- and double-quoted scalars, ``|``/``>`` block scalars,
comments, flow and block lists, CRLF and a BOM. That slice is read to the values PyYAML
(``yaml.safe_load``) gives. Everything else (anchors, tags, flow maps, a quoted value over
several lines, maps nested twice, a value YAML reads as a bool, number or date where a string is
needed, ...) is *rejected* with a line and a reason: a rejected skill is skipped with a warning,
while a misread description or tools list would change what the agent does.
``tests/test_frontmatter*.py`` hold the reader to that against PyYAML and 92 real files.

Only the first :data:`HEAD_BYTES` bytes are read. The YAML text is the lines between the two
``---`` lines with no newline after the last one, as deepagents cuts it: so a block scalar that
is the last value has no final newline.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeAlias

__all__ = ["DESCRIPTION_MAX", "HEAD_BYTES", "NAME_MAX", "Frontmatter", "FrontmatterError",
           "naming_rule_problem", "parse", "split_tools"]

HEAD_BYTES = 16384
"""The bytes of a file :func:`parse` reads: the longest real frontmatter is about 1.2 KB and a
1024-character description at most 4 KB of UTF-8; 16 KiB leaves room and is one small read."""
NAME_MAX = 64
DESCRIPTION_MAX = 1024


class FrontmatterError(ValueError):
    """The frontmatter cannot be read or breaks a rule. ``line`` counts from the opening ``---``
    (line 1), or is ``None`` when no single line is at fault (a missing key)."""

    def __init__(self, reason: str, line: int | None = None) -> None:
        self.reason, self.line = reason, line
        super().__init__(reason if line is None else f"line {line}: {reason}")


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
    """Read the frontmatter at the start of ``head`` (``str`` or UTF-8 ``bytes``).

    Raises only :class:`FrontmatterError`, an internal failure included, so one odd file can
    never break the skills loader.
    """
    try:
        return _schema(_Reader(_lines(head)).mapping(0, ""))
    except FrontmatterError:
        raise
    except Exception as exc:  # the contract is "only FrontmatterError"
        raise FrontmatterError(f"internal error while reading frontmatter: {exc!r}") from exc


# --- the head: bytes in, the frontmatter's lines out -------------------------------------------

_MARKER = re.compile(rb"---[ \t]*\r?(?:\n|\Z)")
# What PyYAML refuses to read, and the line breaks other than "\n" (a bare CR, NEL, LS, PS).
_UNREADABLE = re.compile("[^\t\n\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]|[\u2028\u2029]")
_BAD_LINE = re.compile(r"^(?:(---|\.\.\.)(?=[ \t]|$)| *\t)", re.M)


def _lines(head: object) -> list[str]:
    """The lines between the opening and closing ``---``; line ``i`` is line ``i + 2`` of the file.

    The input is sliced before anything else touches it, so a body is never read. A head within
    3 bytes of the limit may end inside a line (or inside a character the caller dropped), so its
    last line is never trusted.
    """
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
        where = f" within the first {HEAD_BYTES} bytes" if cut else ": no closing '---' line"
        raise FrontmatterError(f"frontmatter not closed{where}", 1)
    raw = data[opening.end() : max(opening.end(), close)]
    try:
        text = raw.decode("utf-8").removesuffix("\r").replace("\r\n", "\n")
    except UnicodeDecodeError as exc:
        raise FrontmatterError("not valid UTF-8", raw.count(b"\n", 0, exc.start) + 2) from None
    printable = text.replace("\n", "").replace("\t", "").isprintable()  # then all is readable
    if not printable and (bad := _UNREADABLE.search(text)):
        raise FrontmatterError(f"unsupported character U+{ord(bad.group()):04X}",
                               text.count("\n", 0, bad.start()) + 2)
    suspect = "\t" in text or text[:3] in ("---", "...") or "\n---" in text or "\n..." in text
    if suspect and (bad := _BAD_LINE.search(text)):
        reason = (f"document marker {bad.group(1)!r} inside the frontmatter" if bad.group(1)
                  else "tab in indentation; indent with spaces")
        raise FrontmatterError(reason, text.count("\n", 0, bad.start()) + 2)
    return text.split("\n")


# --- values ------------------------------------------------------------------------------------

_Scalar: TypeAlias = tuple[str, str, int]  # (the type PyYAML builds: "str", "bool", ...; text; line)
_Node: TypeAlias = "_Scalar | list[_Scalar] | dict[str, tuple[int, _Node]]"

# PyYAML's implicit resolvers (yaml/resolver.py): an unquoted scalar matching one is not a string.
_RESOLVED = re.compile(r"""
    (?P<bool>yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)
   |(?P<float>[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+][0-9]+)? |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
      |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]* |[-+]?\.(?:inf|Inf|INF) |\.(?:nan|NaN|NAN))
   |(?P<int>[-+]?0b[0-1_]+ |[-+]?0[0-7_]+ |[-+]?(?:0|[1-9][0-9_]*) |[-+]?0x[0-9a-fA-F_]+
      |[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)
   |(?P<null>~|null|Null|NULL|)
   |(?P<timestamp>[0-9]{4}-[0-9]{2}-[0-9]{2}
      |[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]*)?
       (?:[ \t]*(?:Z|[-+][0-9]{1,2}(?::[0-9]{2})?))?)
   |(?P<merge_key><<)|(?P<value_key>=)""", re.X)
_RESOLVED_FIRST = frozenset("yYnNtTfFoO-+0123456789.~<=")
_KEY = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_./-]{0,127}):(?=[ \t]|$)")
_QUOTED = {'"': re.compile(r'[^"\\]*(?:\\.[^"\\]*)*'), "'": re.compile(r"[^']*(?:''[^']*)*")}
_ESCAPE = re.compile(r"\\(?:x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|(.))")
_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v",
            "f": "\f", "r": "\r", "e": "\x1b", " ": " ", '"': '"', "\\": "\\", "/": "/",
            "N": "\x85", "_": "\xa0", "L": "\u2028", "P": "\u2029"}
_FLOW_BAD = re.compile(r"^[\[{}?:#&*!|>%@`]|^-(?: |$)|[\[\]{}?\t]|: | #|:$")
_NO_START = {"{": "flow mappings ('{...}') are not supported", "&": "anchors ('&') are not supported",
             "*": "aliases ('*') are not supported", "!": "tags ('!') are not supported",
             **{c: f"'{c}' cannot start a value; quote it" for c in "%@`?:,]}"},
             **dict.fromkeys("\u201c\u201d\u2018\u2019\u201e", "curly (smart) quotes do not quote a "
                             "value in YAML; use straight quotes \" or '")}


def _kind(text: str) -> str:
    """The type PyYAML gives an unquoted scalar: "str" unless one of its resolvers matches."""
    match = _RESOLVED.fullmatch(text) if not text or text[0] in _RESOLVED_FIRST else None
    return "str" if match is None else str(match.lastgroup).replace("_", " ")


def _tail(rest: str, line: int, after: str) -> None:
    """After a complete value only spaces and a ``#`` comment may follow on its line."""
    if rest and not (rest[0] == " " and rest.lstrip(" ")[:1] in ("", "#")):
        raise FrontmatterError(f"unexpected text after {after}", line)


def _spaces(text: str, i: int) -> int:
    """The index of the first character at or after ``i`` that is not a space."""
    while text[i : i + 1] == " ":
        i += 1
    return i


def _plain_line(text: str, line: int) -> tuple[str, bool]:
    """One line of an unquoted value without its comment; and whether a comment ended it."""
    cut = text.find(" #")
    text = (text if cut < 0 else text[:cut]).rstrip(" ")
    if "\t" in text:
        raise FrontmatterError("tab inside an unquoted value; quote the value", line)
    if ": " in text or text.endswith(":"):
        raise FrontmatterError("': ' inside an unquoted value; quote the value", line)
    return text, cut >= 0


def _quoted(text: str, start: int, line: int) -> tuple[str, int]:
    """The quoted scalar at ``text[start]`` and the index after its closing quote."""
    quote = text[start]
    match = _QUOTED[quote].match(text, start + 1)
    end = match.end() if match else start + 1
    if text[end : end + 1] != quote:
        raise FrontmatterError(f"the {quote}-quoted value does not close on its line (hango reads "
                               "quoted values on one line; for long text use a block scalar, >-)", line)
    body = text[start + 1 : end]
    return (_unescape(body, line) if quote == '"' else body.replace("''", "'")), end + 1


def _unescape(text: str, line: int) -> str:
    """Decode the escapes of a double-quoted scalar."""

    def one(match: re.Match[str]) -> str:
        if (char := match.group(4)) is not None:
            if char in _ESCAPES:
                return _ESCAPES[char]
            raise FrontmatterError(f"invalid escape '\\{char}'", line)
        code = int(match.group(1) or match.group(2) or match.group(3), 16)
        if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            raise FrontmatterError(f"escape '{match.group()}' is not a valid character", line)
        return chr(code)

    return _ESCAPE.sub(one, text) if "\\" in text else text


class _Reader:
    """Recursive descent over the lines; ``i`` is the next line not yet consumed."""

    def __init__(self, lines: list[str]) -> None:
        self.lines, self.i = lines, 0

    def skip(self) -> int:
        """Pass blank and comment lines; the next line's indentation, or -1 at the end."""
        while self.i < len(self.lines):
            text = self.lines[self.i].lstrip(" ")
            if text and text[0] != "#":
                return len(self.lines[self.i]) - len(text)
            self.i += 1
        return -1

    def mapping(self, indent: int, parent: str) -> dict[str, tuple[int, _Node]]:
        """``key: value`` lines at column ``indent``: the top level, or the map under ``parent``."""
        entries: dict[str, tuple[int, _Node]] = {}
        while (at := self.skip()) >= indent:
            line, text = self.i + 2, self.lines[self.i][at:]
            if at > indent:
                raise FrontmatterError("unexpected indentation" if parent or entries
                                       else "top-level keys must not be indented", line)
            if (match := _KEY.match(text)) is None:
                item = text == "-" or text[:2] == "- "
                raise FrontmatterError("a list item where a 'key: value' line was expected" if item
                                       else "expected 'key: value' (a key is letters, digits, '_', "
                                       "'-', '.' or '/', then ': ')", line)
            if (key := match.group(1)) in entries:
                raise FrontmatterError(f"duplicate key '{key}' (first on line {entries[key][0]})", line)
            if (kind := _kind(key)) != "str":
                raise FrontmatterError(f"key '{key}' would be read by YAML as a {kind}", line)
            self.i += 1
            entries[key] = (line, self.value(text[len(key) + 1 :], indent, parent + key))
        return entries

    def value(self, rest: str, indent: int, path: str) -> _Node:
        """The value after ``key:``, on its line or below it. ``path`` is "key" or "parent.key"."""
        text, line = rest.lstrip(" "), self.i + 1
        if text[:1] == "\t":
            raise FrontmatterError("tab after ':'; use a space", line)
        if text and text[0] != "#":
            return self.inline(text, indent)
        if (at := self.skip()) < indent:
            return ("null", "", line)
        below = self.lines[self.i][at:]
        if below == "-" or below[:2] == "- ":
            return self.items(at)
        if at == indent:
            return ("null", "", line)
        if _KEY.match(below) and indent:  # a map inside a map: deeper than the schema goes
            raise FrontmatterError(f"'{path}' holds a nested mapping; hango reads one level of "
                                   "keys (metadata values are strings)", line)
        if _KEY.match(below):
            return self.mapping(at, path + ".")
        self.i += 1
        return self.inline(below, indent)

    def inline(self, text: str, indent: int) -> _Node:
        """A value from ``text`` (line ``i - 1``) on; lines below must be deeper than ``indent``."""
        first, line = text[0], self.i + 1
        if first in _QUOTED:
            value, end = _quoted(text, 0, line)
            _tail(text[end:], line, "the closing quote")
            return ("str", value, line)
        if first in "|>":
            return self.block(text, line, indent)
        if first == "[":
            return self.flow(text, line)
        if first in _NO_START:
            raise FrontmatterError(_NO_START[first], line)
        if text == "-" or text[:2] == "- ":
            raise FrontmatterError("a block list must start on the line after its key", line)
        value, ended = _plain_line(text, line)
        chunks, blanks, lines = [value], 0, self.lines
        while not ended and self.i < len(lines):  # fold more-indented lines as YAML does
            more = lines[self.i].lstrip(" ")
            if not more:
                blanks += 1
            elif len(lines[self.i]) - len(more) <= indent or more[0] == "#":
                break
            else:
                value, ended = _plain_line(more, self.i + 2)
                chunks += ("\n" * blanks or " ", value)
                blanks = 0
            self.i += 1
        folded = "".join(chunks)
        return (_kind(folded), folded, line)

    def block(self, header: str, line: int, indent: int) -> _Scalar:
        """A ``|`` or ``>`` block scalar, following PyYAML's scan_block_scalar."""
        folded, chomp, rest = header[0] == ">", header[1:2], header[2:]
        if chomp not in ("+", "-"):
            chomp, rest = "", header[1:]
        if rest[:1].isdigit() or rest[:1] in ("+", "-"):
            raise FrontmatterError("block scalar indentation indicators are unsupported", line)
        _tail(rest, line, "the block scalar indicator")
        lines, j, last = self.lines, self.i, len(self.lines) - 1
        breaks, width = 0, indent + 1  # the content's indentation: the first line's, if deeper

        def indent_of(k: int) -> int:
            return len(lines[k]) - len(lines[k].lstrip(" "))

        while j <= last and not lines[j].strip(" "):
            width, breaks, j = max(width, len(lines[j])), breaks + (j < last), j + 1
        width = max(width, indent_of(j)) if j <= last else width
        chunks: list[str] = []
        line_break = ""
        while j <= last and indent_of(j) >= width:
            content = lines[j][width:]
            chunks += ("\n" * breaks, content)
            line_break, breaks, j = "\n" * (j < last), 0, j + 1  # no "\n" after the last line
            while j <= last and not lines[j].strip(" ") and len(lines[j]) <= width:
                breaks, j = breaks + (j < last), j + 1
            if j > last or indent_of(j) < width:
                break
            if folded and content[:1] != " " and lines[j][width] != " ":
                chunks.append("" if breaks else " ")  # fold: one break becomes a space
            else:
                chunks.append(line_break)
        if chomp != "-":  # clip keeps the last break; keep (+) also the blank lines after it
            chunks.append(line_break + "\n" * breaks * (chomp == "+"))
        self.i = j
        return ("str", "".join(chunks), line)

    def flow(self, text: str, line: int) -> list[_Scalar]:
        """A one-line flow list ``[a, 'b c', "d"]`` of scalars."""
        items: list[_Scalar] = []
        i = _spaces(text, 1)
        while text[i : i + 1] != "]":
            if i == len(text) or text[i] == "#":
                raise FrontmatterError("a flow list must close with ']' on its line", line)
            if text[i] in _QUOTED:
                value, i = _quoted(text, i, line)
                items.append(("str", value, line))
            else:
                end = min(p for p in (text.find(",", i), text.find("]", i), len(text)) if p >= 0)
                item, i = text[i:end].rstrip(" "), end
                if not item or _FLOW_BAD.search(item):
                    raise FrontmatterError(f"flow list item {item!r} needs quotes" if item
                                           else "empty item in flow list", line)
                items.append((_kind(item), item, line))
            i = _spaces(text, i)
            if text[i : i + 1] == ",":
                i = _spaces(text, i + 1)
            elif i < len(text) and text[i] != "]":
                raise FrontmatterError("expected ',' or ']' in flow list", line)
        _tail(text[i + 1 :], line, "']'")
        return items

    def items(self, column: int) -> list[_Scalar]:
        """A block list: ``- item`` lines at ``column``, each item a scalar."""
        items: list[_Scalar] = []
        while self.skip() == column and (self.lines[self.i][column:] + " ")[:2] == "- ":
            text, line = self.lines[self.i][column + 1 :].lstrip(" "), self.i + 2
            self.i += 1
            if not text or text[0] == "#":
                raise FrontmatterError("empty list item (write the item on its '-' line)", line)
            nested = text == "-" or text[:2] == "- " or _KEY.match(text)
            node = None if nested else self.inline(text, column)
            if not isinstance(node, tuple):
                raise FrontmatterError("list items must be scalars, not lists or mappings", line)
            items.append(node)
        return items


# --- the schema --------------------------------------------------------------------------------

_TOOL_KEYS = ("allowed-tools", "allowed_tools")
_KNOWN = frozenset(("name", "description", "metadata", "license", "compatibility", *_TOOL_KEYS))
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SPEC_NAME = re.compile(r"[^\W_]+(?:-[^\W_]+)*")  # letters and digits, single inner hyphens
_TOOL = re.compile(r"(?:[^\s,()]|\([^()]*\))+")  # a tool name, maybe with one (pattern)


def _string(node: _Node, what: str, line: int) -> str:
    """A value hango needs as a string; anything else is a reason to reject."""
    if not isinstance(node, tuple):
        kind = "list" if isinstance(node, list) else "mapping"
        raise FrontmatterError(f"'{what}' must be a string, not a {kind}", line)
    if node[0] != "str":
        raise FrontmatterError(f"'{what}' has no value" if node[0] == "null" else
                               f"'{what}': YAML reads {node[1]!r} as a {node[0]}, not a string; "
                               "quote it", line)
    return node[1]


def _schema(entries: dict[str, tuple[int, _Node]]) -> Frontmatter:
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


def _tools(entries: dict[str, tuple[int, _Node]]) -> tuple[str, ...] | None:
    """The tools under ``allowed-tools`` (the spec's key) or ``allowed_tools`` (hango's), not both:
    a list, or a string split as :func:`split_tools` does. None when neither key is present."""
    keys = [key for key in _TOOL_KEYS if key in entries]
    if len(keys) != 1:
        if keys:
            raise FrontmatterError("both 'allowed-tools' and 'allowed_tools' given; keep one",
                                   max(entries[key][0] for key in keys))
        return None
    line, node = entries[keys[0]]
    if isinstance(node, tuple) and node[0] == "null":
        raise FrontmatterError(f"'{keys[0]}' has no value; write [] for none or drop the key", line)
    if isinstance(node, list):
        tools = tuple(_string(item, f"{keys[0]} item", item[2]) for item in node)
    else:
        try:
            tools = split_tools(_string(node, keys[0], line))
        except ValueError as exc:
            raise FrontmatterError(f"'{keys[0]}': {exc}", line) from None
    for tool in tools:
        if not tool.strip():
            raise FrontmatterError(f"'{keys[0]}' has an empty item", line)
        if tool.startswith("("):  # "(read_file, ls)": a list written in parentheses
            raise FrontmatterError(
                f"'{keys[0]}': {tool!r} is not a tool name (parentheses follow a tool name, as in "
                f"Bash(git:*)); to list tools, separate them with spaces: {keys[0]}: "
                + " ".join(re.findall(r"[^\s,()]+", tool)), line)
    return tools


def split_tools(text: str) -> tuple[str, ...]:
    """Split a tools string on whitespace and commas outside parentheses: ``"Bash(git log:*)
    Read, Grep"`` gives ``("Bash(git log:*)", "Read", "Grep")``. The Agent Skills spec writes a
    space-separated string; deepagents also splits on commas. ValueError on a stray parenthesis.
    """
    if re.search("[()]", _TOOL.sub("", text)):
        raise ValueError("unbalanced or nested parentheses")
    return tuple(_TOOL.findall(text))


def _metadata(entry: tuple[int, _Node] | None) -> Mapping[str, str] | None:
    """The ``metadata`` map of strings (read-only); None when absent or null."""
    if entry is None or (isinstance(entry[1], tuple) and entry[1][0] == "null"):
        return None
    if not isinstance(entry[1], dict):
        raise FrontmatterError("'metadata' must be a mapping of strings", entry[0])
    return MappingProxyType({k: _string(v, f"metadata.{k}", n) for k, (n, v) in entry[1].items()})
