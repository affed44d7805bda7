"""The slice of YAML that SKILL.md frontmatters use: lines in, values out; the rest refused.

Plain, single- and double-quoted scalars (quoted ones on one line), ``|`` and ``>`` block
scalars with chomping, ``#`` comments, one-line flow lists, block lists of scalars, and maps one
level deep. Every value is what PyYAML (``yaml.safe_load``) reads from the same text; whatever
this reader cannot be sure of raises :class:`SliceError` with a line and a reason. It knows
nothing about skills: :mod:`hango.agent.frontmatter` cuts the lines out of a file and checks the
values against the skill schema.
"""

from __future__ import annotations

import re
from typing import ClassVar, TypeAlias

from hango.errors import HangoError

__all__ = ["Entries", "Node", "Scalar", "SliceError", "clip", "read"]


class SliceError(HangoError, ValueError):
    """The text is outside the slice. ``line`` counts from the file's first line, or is None."""

    status: ClassVar[int] = 422

    def __init__(self, reason: str, line: int | None = None) -> None:
        self.reason, self.line = reason, line
        super().__init__(reason if line is None else f"line {line}: {reason}")


Scalar: TypeAlias = tuple[str, str, int]  # (the type PyYAML builds: "str", "bool", ...; text; line)
Node: TypeAlias = "Scalar | list[Scalar] | dict[str, tuple[int, Node]]"
Entries: TypeAlias = "dict[str, tuple[int, Node]]"  # key -> (its line, its value), in file order

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
_QUOTED = "\"'"
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


def clip(text: str, limit: int = 60) -> str:
    """``text`` cut short for a message: a reason quotes the value, never 16 KiB of it."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _kind(text: str) -> str:
    """The type PyYAML gives an unquoted scalar: "str" unless one of its resolvers matches."""
    match = _RESOLVED.fullmatch(text) if not text or text[0] in _RESOLVED_FIRST else None
    return "str" if match is None else str(match.lastgroup).replace("_", " ")


def _tail(rest: str, line: int, after: str) -> None:
    """After a complete value only spaces and a ``#`` comment may follow on its line."""
    if rest and not (rest[0] == " " and rest.lstrip(" ")[:1] in ("", "#")):
        raise SliceError(f"unexpected text after {after}", line)


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip(" "))


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
        raise SliceError("tab inside an unquoted value; quote the value", line)
    if ": " in text or text.endswith(":"):
        raise SliceError("': ' inside an unquoted value; quote the value", line)
    return text, cut >= 0


def _quoted(text: str, start: int, line: int) -> tuple[str, int]:
    """The quoted scalar at ``text[start]`` and the index after its closing quote."""
    quote, end = text[start], start
    while (end := text.find(quote, end + 1)) >= 0:  # str.find: far faster than a regex here
        if quote == "'" and text[end + 1 : end + 2] == "'":
            end += 1  # '' is an escaped quote
            continue
        run = end  # in double quotes, an odd run of backslashes escapes the quote
        while quote == '"' and text[run - 1] == "\\":
            run -= 1
        if (end - run) % 2 == 0:
            break
    if end < 0:
        raise SliceError(f"the {quote}-quoted value does not close on its line (quoted values "
                         "must fit on one line; for long text use a block scalar, >-)", line)
    body = text[start + 1 : end]
    return (_unescape(body, line) if quote == '"' else body.replace("''", "'")), end + 1


def _unescape(text: str, line: int) -> str:
    """Decode the escapes of a double-quoted scalar."""

    def one(match: re.Match[str]) -> str:
        if (char := match.group(4)) is not None:
            if char in _ESCAPES:
                return _ESCAPES[char]
            raise SliceError(f"invalid escape '\\{char}'", line)
        code = int(match.group(1) or match.group(2) or match.group(3), 16)
        if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            raise SliceError(f"escape '{match.group()}' is not a valid character", line)
        return chr(code)

    return _ESCAPE.sub(one, text) if "\\" in text else text


class _Reader:
    """Recursive descent over the lines; ``i`` is the next line not yet consumed."""

    def __init__(self, lines: list[str]) -> None:
        self.lines, self.i = lines, 0

    def skip(self) -> int:
        """Pass blank and comment lines; the next line's indentation, or -1 at the end."""
        while self.i < len(self.lines):
            if (text := self.lines[self.i].lstrip(" ")) and text[0] != "#":
                return len(self.lines[self.i]) - len(text)
            self.i += 1
        return -1

    def mapping(self, indent: int, parent: str) -> dict[str, tuple[int, Node]]:
        """``key: value`` lines at column ``indent``: the top level, or the map under ``parent``."""
        entries: dict[str, tuple[int, Node]] = {}
        while (at := self.skip()) >= indent:
            line, text = self.i + 2, self.lines[self.i][at:]
            if at > indent:
                raise SliceError("unexpected indentation" if parent or entries
                                 else "top-level keys must not be indented", line)
            if (match := _KEY.match(text)) is None:
                item = text == "-" or text[:2] == "- "
                raise SliceError("a list item where a 'key: value' line was expected" if item
                                 else "expected 'key: value' (a key is letters, digits, '_', '-', "
                                 "'.' or '/', then ': ')", line)
            if (key := match.group(1)) in entries:
                raise SliceError(f"duplicate key '{key}' (first on line {entries[key][0]})", line)
            if key[0] in _RESOLVED_FIRST and (kind := _kind(key)) != "str":
                raise SliceError(f"key '{key}' would be read by YAML as a {kind}", line)
            self.i += 1
            entries[key] = (line, self.value(text[len(key) + 1 :], indent, parent + key))
        return entries

    def value(self, rest: str, indent: int, path: str) -> Node:
        """The value after ``key:``, on its line or below it. ``path`` is "key" or "parent.key"."""
        text, line = rest.lstrip(" "), self.i + 1
        if text[:1] == "\t":
            raise SliceError("tab after ':'; use a space", line)
        if text and text[0] != "#":
            return self.inline(text, indent)
        below = self.lines[self.i][at:] if (at := self.skip()) >= indent else ""
        if below == "-" or below[:2] == "- ":
            return self.items(at)
        if at <= indent:
            return ("null", "", line)
        if _KEY.match(below):
            if indent:  # a map inside a map: deeper than the schema goes
                raise SliceError(f"'{path}' holds a nested mapping; hango reads one level "
                                 "of keys (metadata values are strings)", line)
            return self.mapping(at, path + ".")
        self.i += 1
        return self.inline(below, indent)

    def inline(self, text: str, indent: int) -> Node:
        """A value from ``text`` (line ``i - 1``) on; lines below must be deeper than ``indent``."""
        first, line, lines = text[0], self.i + 1, self.lines
        if first in _QUOTED:
            value, end = _quoted(text, 0, line)
            _tail(text[end:], line, "the closing quote")
            return ("str", value, line)
        if first in "|>":
            return self.block(text, line, indent)
        if first == "[":
            return self.flow(text, line)
        if first in _NO_START:
            raise SliceError(_NO_START[first], line)
        if text == "-" or text[:2] == "- ":
            raise SliceError("a block list must start on the line after its key", line)
        value, ended = _plain_line(text, line)
        if ended or self.i == len(lines) or lines[self.i][:1] not in ("", " "):  # the common case
            return (_kind(value), value, line)
        chunks, blanks = [value], 0
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

    def block(self, header: str, line: int, indent: int) -> Scalar:
        """A ``|`` or ``>`` block scalar, following PyYAML's scan_block_scalar."""
        folded, chomp, rest = header[0] == ">", header[1:2], header[2:]
        if chomp not in ("+", "-"):
            chomp, rest = "", header[1:]
        if rest[:1].isdigit() or rest[:1] in ("+", "-"):
            raise SliceError("block scalar indentation indicators are unsupported", line)
        _tail(rest, line, "the block scalar indicator")
        lines, j, last = self.lines, self.i, len(self.lines) - 1
        breaks, width = 0, indent + 1  # the content's indentation: the first line's, if deeper
        while j <= last and not lines[j].strip(" "):
            width, breaks, j = max(width, len(lines[j])), breaks + (j < last), j + 1
        width = max(width, _indent(lines[j])) if j <= last else width
        chunks: list[str] = []
        line_break = ""
        while j <= last and _indent(lines[j]) >= width:
            content = lines[j][width:]
            chunks += ("\n" * breaks, content)
            line_break, breaks, j = "\n" * (j < last), 0, j + 1  # no "\n" after the last line
            while j <= last and not lines[j].strip(" ") and len(lines[j]) <= width:
                breaks, j = breaks + (j < last), j + 1
            if j > last or _indent(lines[j]) < width:
                break
            if folded and content[:1] != " " and lines[j][width] != " ":
                chunks.append("" if breaks else " ")  # fold: one break becomes a space
            else:
                chunks.append(line_break)
        if chomp != "-":  # clip keeps the last break; keep (+) also the blank lines after it
            chunks.append(line_break + "\n" * breaks * (chomp == "+"))
        self.i = j
        return ("str", "".join(chunks), line)

    def flow(self, text: str, line: int) -> list[Scalar]:
        """A one-line flow list ``[a, 'b c', "d"]`` of scalars."""
        items: list[Scalar] = []
        i = _spaces(text, 1)
        while text[i : i + 1] != "]":
            if i == len(text) or text[i] == "#":
                raise SliceError("a flow list must close with ']' on its line", line)
            if text[i] in _QUOTED:
                value, i = _quoted(text, i, line)
                items.append(("str", value, line))
            else:
                end = min(p for p in (text.find(",", i), text.find("]", i), len(text)) if p >= 0)
                item, i = text[i:end].rstrip(" "), end
                if not item or _FLOW_BAD.search(item):
                    raise SliceError(f"flow list item {clip(item)!r} needs quotes" if item
                                     else "empty item in flow list", line)
                items.append((_kind(item), item, line))
            i = _spaces(text, i)
            if text[i : i + 1] == ",":
                i = _spaces(text, i + 1)
            elif i < len(text) and text[i] != "]":
                raise SliceError("expected ',' or ']' in flow list", line)
        _tail(text[i + 1 :], line, "']'")
        return items

    def items(self, column: int) -> list[Scalar]:
        """A block list: ``- item`` lines at ``column``, each item a scalar."""
        items: list[Scalar] = []
        while self.skip() == column and (self.lines[self.i][column:] + " ")[:2] == "- ":
            text, line = self.lines[self.i][column + 1 :].lstrip(" "), self.i + 2
            self.i += 1
            if not text or text[0] == "#":
                raise SliceError("empty list item (write the item on its '-' line)", line)
            nested = text == "-" or text[:2] == "- " or _KEY.match(text)
            node = None if nested else self.inline(text, column)
            if not isinstance(node, tuple):
                raise SliceError("list items must be scalars, not lists or mappings", line)
            items.append(node)
        return items


def read(lines: list[str]) -> Entries:
    """The top-level map of these lines; line ``i`` is line ``i + 2`` of the file."""
    return _Reader(lines).mapping(0, "")
