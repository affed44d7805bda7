"""Read the YAML frontmatter of a SKILL.md file, without a YAML library.

A skill's frontmatter is a small fixed schema (``name``, ``description``, an optional
tools list, an optional ``metadata`` map), but real files use a fair slice of YAML to
write it: quoted strings with colons and escapes, ``|`` and ``>`` block scalars,
plain values wrapped over several lines, comments, flow and block lists, CRLF and a
BOM. This module reads exactly that slice and gives the same values PyYAML
(``yaml.safe_load``) gives. Everything outside the slice is *rejected* with a reason
and a line number: a rejected skill is skipped with a warning, while a silently
misread description or tools list would change what the agent does.

Decisions worth knowing (each one is a test in ``tests/test_frontmatter.py``):

* Only the head of the file is read: the first :data:`HEAD_BYTES` bytes. Whatever
  follows the head is never looked at, so a 16 MB body costs what a small one does.
  A frontmatter that does not close inside the head is rejected.
* Values YAML would read as something other than a string are rejected where hango
  needs a string. ``name: yes`` is the boolean ``True`` for PyYAML, ``name: 1.0`` a
  float, ``name: 2024-01-01`` a date; hango refuses rather than pick one reading.
  The same holds for ``metadata`` values: the Agent Skills spec says they are
  strings, the reference validator (strictyaml) would read ``version: 1.0`` as the
  string ``"1.0"`` and PyYAML as the float ``1.0``, so the file means different
  things to different readers and the honest answer is "quote it".
* ``license`` and ``compatibility`` (optional fields of the Agent Skills spec) are read
  and ignored silently. Other unknown keys (``model``, ``version``, ...) are parsed and then
  ignored with a warning. Their values may be of any type hango can read. An unknown
  key whose value uses YAML that hango cannot read (an anchor, a flow map, a list of
  mappings, ...) rejects the whole file: without reading the value we cannot know
  where it ends, and so cannot trust the keys after it.
* The tools key is ``allowed-tools`` (the Agent Skills spec) or ``allowed_tools``
  (hango's seed spelling); both at once is rejected. It may
  be a flow list, a block list, or a string split on whitespace and commas outside
  parentheses (``Bash(git log:*) Read``). ``allowed_tools`` is ``None`` when the key
  is absent and ``()`` when it is present and empty: absent means "no narrowing",
  empty means "no tools", so the two must never be confused. A null value
  (``allowed-tools:`` with nothing after it) is rejected for the same reason.
* Name: 1..64 characters on one printable line (it goes into a one-line prompt
  index). The Agent Skills naming rule (lowercase letters and digits, single inner
  hyphens) is only a warning: published skills such as ``code_explorer`` break it.
  Description: 1..1024 characters, no control characters except newline and tab.
* Duplicate keys are rejected (PyYAML silently keeps the last one).
* The YAML text is the lines between the two markers joined by newlines, with no
  newline after the last line. That is what deepagents feeds PyYAML (its pattern
  captures up to, not including, the newline before the closing ``---``) and what the
  public corpus records. It only shows in a block scalar that is the last value:
  ``description: >`` as the last key reads without a trailing newline. Splitting
  with ``content.split("---", 2)``, as skills-ref does, keeps that newline; the
  tools disagree, and hango follows the corpus.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeAlias

__all__ = [
    "DESCRIPTION_MAX",
    "HEAD_BYTES",
    "NAME_MAX",
    "Frontmatter",
    "FrontmatterError",
    "parse",
    "split_tools",
]

HEAD_BYTES = 16384
"""How many bytes of a file the caller fetches and :func:`parse` reads.

The longest frontmatter in the public corpus is about 1.2 KB; a description at its
1024-character cap is at most 4 KB of UTF-8. 16 KiB leaves room for comments,
metadata and unknown keys while staying one small database read.
"""
NAME_MAX = 64
DESCRIPTION_MAX = 1024
_MAX_DEPTH = 8  # nested mappings; the schema needs 2, the cap keeps recursion bounded


class FrontmatterError(ValueError):
    """The frontmatter cannot be read, or breaks one of hango's rules.

    ``line`` is 1-based and counts from the file's first line (the opening ``---``),
    or is ``None`` when the problem has no single line (a missing key).
    """

    def __init__(self, reason: str, line: int | None = None) -> None:
        self.reason = reason
        self.line = line
        super().__init__(reason if line is None else f"line {line}: {reason}")


@dataclass(frozen=True)
class Frontmatter:
    """What hango reads from a SKILL.md frontmatter."""

    name: str
    description: str
    allowed_tools: tuple[str, ...] | None
    """``None`` when no tools key is present; ``()`` when it lists no tools."""
    metadata: Mapping[str, str] | None = field(default=None, hash=False)
    """The ``metadata`` map (read-only), or ``None`` when absent or empty."""
    keys: tuple[str, ...] = ()
    """Every top-level key, in file order."""
    warnings: tuple[str, ...] = ()


def parse(head: str | bytes) -> Frontmatter:
    """Read the frontmatter at the start of ``head``; raise :class:`FrontmatterError`.

    ``head`` is the start of the file (``str`` or UTF-8 ``bytes``); only its first
    :data:`HEAD_BYTES` bytes are used. This function raises nothing but
    :class:`FrontmatterError`: an unexpected internal failure is reported as one too,
    so one odd file can never break the skills loader.
    """
    try:
        lines = _frontmatter_lines(head)
        return _to_frontmatter(_Parser(lines).document())
    except FrontmatterError:
        raise
    except Exception as exc:  # the contract is "only FrontmatterError"
        raise FrontmatterError(f"internal error while reading frontmatter: {exc!r}") from exc


# --------------------------------------------------------------------------- head


class _Line:
    """One frontmatter line: its 1-based number in the file, its text, its indentation."""

    __slots__ = ("blank", "comment", "indent", "number", "raw", "text")

    def __init__(self, number: int, raw: str) -> None:
        self.number, self.raw = number, raw
        self.text = raw.lstrip(" ")  # the line without its indentation
        self.indent = len(raw) - len(self.text)
        self.blank = not self.text
        self.comment = self.text.startswith("#")


def _skip(text: str, i: int, chars: str = " ") -> int:
    """The index of the first character at or after ``i`` that is not in ``chars``."""
    while i < len(text) and text[i] in chars:
        i += 1
    return i


# Characters PyYAML refuses to read (its Reader.NON_PRINTABLE), plus the line breaks
# YAML knows besides "\n": a bare "\r", NEL, LS and PS would split a line where we
# do not, so they are rejected rather than guessed at.
_UNREADABLE = re.compile("[^\x09\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]|[\u2028\u2029]")


def _take_head(head: object) -> tuple[bytes, bool]:
    """The first HEAD_BYTES bytes, and whether the file may go on past them.

    The input is sliced before anything else touches it, so the body is never read.
    A caller that decoded a byte-limited read may have dropped up to 3 bytes of a
    character cut in two, so a head within 3 bytes of the limit counts as cut too.
    """
    if isinstance(head, str):
        data = head[:HEAD_BYTES].encode("utf-8", "surrogatepass")
    elif isinstance(head, (bytes, bytearray, memoryview)):
        data = bytes(head[:HEAD_BYTES])
    else:
        raise FrontmatterError(f"expected str or bytes, got {type(head).__name__}")
    return data[:HEAD_BYTES], len(data) > HEAD_BYTES - 4


def _is_marker(line: bytes) -> bool:
    return line.rstrip(b" \t") == b"---"


def _frontmatter_lines(head: object) -> list[_Line]:
    """Split off the lines between the opening and the closing ``---``."""
    data, maybe_cut = _take_head(head)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    raw = [line.removesuffix(b"\r") for line in data.split(b"\n")]
    if maybe_cut:
        raw.pop()  # the last line may be cut short: never trust it
    if not raw or not _is_marker(raw[0]):
        raise FrontmatterError("no frontmatter: the file must start with a '---' line", 1)
    close = next((i for i in range(1, len(raw)) if _is_marker(raw[i])), None)
    if close is None:
        if maybe_cut:
            raise FrontmatterError(f"frontmatter not closed within the first {HEAD_BYTES} bytes", 1)
        raise FrontmatterError("frontmatter not closed: no closing '---' line", 1)
    return [_decode(raw[i], i + 1) for i in range(1, close)]


def _decode(raw: bytes, number: int) -> _Line:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FrontmatterError("not valid UTF-8", number) from None
    bad = _UNREADABLE.search(text)
    if bad:
        raise FrontmatterError(f"unsupported character U+{ord(bad.group()):04X}", number)
    if text[:3] in ("---", "...") and text[3:4] in ("", " ", "\t"):
        raise FrontmatterError(f"document marker {text[:3]!r} inside the frontmatter", number)
    if "\t" in text[: len(text) - len(text.lstrip(" \t"))]:
        raise FrontmatterError("tab in indentation; indent with spaces", number)
    return _Line(number, text)


# ------------------------------------------------------------------------- values


@dataclass(frozen=True)
class _Scalar:
    """A scalar value. ``kind`` is the type PyYAML would build: "str", "bool", ..."""

    value: str
    kind: str
    line: int


@dataclass(frozen=True)
class _Seq:
    items: tuple[_Scalar, ...]


@dataclass(frozen=True)
class _Map:
    entries: dict[str, tuple[int, _Node]]  # key -> (line of the key, value)


_Node: TypeAlias = "_Scalar | _Seq | _Map"

# PyYAML's implicit resolvers (yaml/resolver.py): a plain scalar matching one of
# these is not a string. Each pattern is linear: no nested unbounded repetition.
_NOT_STRING_PATTERNS = {
    "bool": r"""yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF""",
    "float": r"""[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+][0-9]+)?
        |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
        |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
        |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)""",
    "int": r"""[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)
        |[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+""",
    "null": r"""~|null|Null|NULL|""",
    "timestamp": r"""[0-9]{4}-[0-9]{2}-[0-9]{2}
        |[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}
         (?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9]{1,2}(?::[0-9]{2})?))?""",
    "merge key": r"""<<""",
    "value key": r"""=""",
}
_NOT_STRINGS = tuple((kind, re.compile(rx, re.X)) for kind, rx in _NOT_STRING_PATTERNS.items())


def _plain_kind(text: str) -> str:
    """The type PyYAML gives an unquoted scalar: "str" unless a resolver matches."""
    return next((kind for kind, rx in _NOT_STRINGS if rx.fullmatch(text)), "str")


_ESCAPES = {
    "0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v",
    "f": "\f", "r": "\r", "e": "\x1b", " ": " ", '"': '"', "\\": "\\", "/": "/",
    "N": "\x85", "_": "\xa0", "L": "\u2028", "P": "\u2029",
}  # fmt: skip
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_HEX = frozenset("0123456789abcdefABCDEF")

_KEY = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_./-]{0,127}):(?=[ \t]|$)")
_NO_PLAIN_START = {
    "{": "flow mappings ('{...}') are not supported",
    "&": "anchors ('&') are not supported",
    "*": "aliases ('*') are not supported",
    "!": "tags ('!') are not supported",
    "%": "'%' cannot start a value; quote it",
    "@": "'@' cannot start a value; quote it",
    "`": "'`' cannot start a value; quote it",
    "?": "'?' cannot start a value; quote it",
    ":": "':' cannot start a value; quote it",
    ",": "',' cannot start a value; quote it",
    "]": "']' cannot start a value; quote it",
    "}": "'}' cannot start a value; quote it",
}


def _is_item(text: str) -> bool:
    return text == "-" or text.startswith("- ")


def _check_tail(rest: str, line: _Line, after: str) -> None:
    """After a complete value only spaces and a ``#`` comment may follow."""
    if rest and not (rest.startswith(" ") and rest.lstrip(" ")[:1] in ("", "#")):
        raise FrontmatterError(f"unexpected text after {after}", line.number)


def _plain_line(text: str, line: _Line) -> tuple[str, bool]:
    """One line of an unquoted value: drop a trailing comment, refuse ``: ``.

    Returns the text and whether a comment ended the value on this line.
    """
    cut = text.find(" #")
    if cut >= 0:
        text = text[:cut]
    text = text.rstrip(" ")
    if "\t" in text:
        raise FrontmatterError("tab inside an unquoted value; quote the value", line.number)
    if ": " in text or text.endswith(":"):
        raise FrontmatterError("': ' inside an unquoted value; quote the value", line.number)
    return text, cut >= 0


class _Parser:
    """Recursive descent over lines; ``pos`` is the next line not yet consumed."""

    def __init__(self, lines: list[_Line]) -> None:
        self.lines = lines
        self.pos = 0

    def peek(self) -> _Line | None:
        """Skip blank and comment lines; return the next line (not consumed)."""
        lines = self.lines
        while self.pos < len(lines) and (lines[self.pos].blank or lines[self.pos].comment):
            self.pos += 1
        return lines[self.pos] if self.pos < len(lines) else None

    def document(self) -> _Map:
        first = self.peek()
        if first is not None and first.indent:
            raise FrontmatterError("top-level keys must not be indented", first.number)
        return self.mapping(0, 0)

    def mapping(self, indent: int, depth: int) -> _Map:
        """A block mapping whose keys sit at column ``indent``."""
        if depth > _MAX_DEPTH:
            raise FrontmatterError(f"nested deeper than {_MAX_DEPTH} levels", self.lines[self.pos].number)
        entries: dict[str, tuple[int, _Node]] = {}
        while (line := self.peek()) is not None and line.indent >= indent:
            if line.indent > indent:
                raise FrontmatterError("unexpected indentation", line.number)
            key = _key(line)
            if key in entries:
                first = entries[key][0]
                raise FrontmatterError(f"duplicate key '{key}' (first on line {first})", line.number)
            self.pos += 1
            entries[key] = (line.number, self.value(line.text[len(key) + 1 :], line, indent, depth))
        return _Map(entries)

    def value(self, rest: str, line: _Line, indent: int, depth: int) -> _Node:
        """The value after ``key:``: inline, or on the following lines."""
        text = rest.lstrip(" ")
        if text.startswith("\t"):
            raise FrontmatterError("tab after ':'; use a space", line.number)
        if not text or text.startswith("#"):
            return self.nested(line, indent, depth)
        return self.inline(text, line, indent)

    def nested(self, key_line: _Line, indent: int, depth: int) -> _Node:
        """A value that starts on the line after its key: list, mapping or scalar."""
        nxt = self.peek()
        if nxt is None or nxt.indent < indent or (nxt.indent == indent and not _is_item(nxt.text)):
            return _Scalar("", "null", key_line.number)
        if _is_item(nxt.text):
            return self.sequence(nxt.indent)
        if _KEY.match(nxt.text):
            return self.mapping(nxt.indent, depth + 1)
        self.pos += 1
        return self.inline(nxt.text, nxt, indent)

    def sequence(self, indent: int) -> _Seq:
        """A block list of scalars, ``- item`` lines at column ``indent``."""
        items: list[_Scalar] = []
        while (line := self.peek()) is not None and line.indent == indent and _is_item(line.text):
            self.pos += 1
            text = line.text[1:].lstrip(" ")
            if text.startswith("\t"):
                raise FrontmatterError("tab after '-'; use a space", line.number)
            if not text or text.startswith("#"):
                nxt = self.peek()
                if nxt is not None and nxt.indent > indent:
                    raise FrontmatterError("a list item must start on its '-' line", nxt.number)
                items.append(_Scalar("", "null", line.number))
                continue
            node = None if _is_item(text) or _KEY.match(text) else self.inline(text, line, indent)
            if not isinstance(node, _Scalar):
                raise FrontmatterError("list items must be scalars, not lists or mappings", line.number)
            items.append(node)
        return _Seq(tuple(items))

    def inline(self, text: str, line: _Line, indent: int) -> _Node:
        """A value starting at ``text``; continuation lines must be deeper than ``indent``."""
        first = text[0]
        if first in "\"'":
            value, rest, end = self.quoted(text, line, multiline=True)
            _check_tail(rest, end, "the closing quote")
            return _Scalar(value, "str", line.number)
        if first in "|>":
            return self.block(text, line, indent)
        if first == "[":
            return self.flow(text, line)
        if first in _NO_PLAIN_START:
            raise FrontmatterError(_NO_PLAIN_START[first], line.number)
        if _is_item(text):
            raise FrontmatterError("a block list must start on the line after its key", line.number)
        return self.plain(text, line, indent)

    def plain(self, text: str, line: _Line, indent: int) -> _Scalar:
        """An unquoted value, folded over more-indented lines as YAML does."""
        value, ended = _plain_line(text, line)
        chunks = [value]
        blanks = 0
        while not ended and self.pos < len(self.lines):
            nxt = self.lines[self.pos]
            if nxt.blank:
                blanks += 1
            elif nxt.indent <= indent or nxt.comment:
                break
            else:
                value, ended = _plain_line(nxt.text, nxt)
                chunks += ["\n" * blanks or " ", value]
                blanks = 0
            self.pos += 1
        folded = "".join(chunks)
        return _Scalar(folded, _plain_kind(folded), line.number)

    def quoted(self, text: str, line: _Line, *, multiline: bool) -> tuple[str, str, _Line]:
        """A quoted scalar at ``text[0]``: (value, rest of its last line, its last line).

        Line breaks inside the quotes fold as in YAML: one break is a space, each
        blank line a newline, and the whitespace around a break is dropped.
        """
        quote, text, start = text[0], text[1:], line
        chunks: list[str] = []
        while True:
            i, broke = 0, False
            while i < len(text):
                ch = text[i]
                if ch in " \t":
                    end = _skip(text, i, " \t")
                    if end < len(text):  # whitespace before a line break is dropped
                        chunks.append(text[i:end])
                    i = end
                elif ch == quote and quote == "'" and text[i + 1 : i + 2] == "'":
                    chunks.append("'")
                    i += 2
                elif ch == quote:
                    return "".join(chunks), text[i + 1 :], line
                elif ch == "\\" and quote == '"' and i + 1 == len(text):
                    broke, i = True, i + 1  # an escaped line break folds to nothing
                elif ch == "\\" and quote == '"':
                    escaped, i = _escape(text, i + 1, line)
                    chunks.append(escaped)
                else:
                    chunks.append(ch)
                    i += 1
            if not multiline:
                raise FrontmatterError("a quoted flow list item must close on its line", line.number)
            blanks = 0
            while self.pos < len(self.lines) and not self.lines[self.pos].raw.strip(" \t"):
                blanks, self.pos = blanks + 1, self.pos + 1
            if self.pos == len(self.lines):
                raise FrontmatterError(f"unterminated {quote}-quoted string", start.number)
            chunks.append("\n" * blanks if blanks or broke else " ")
            line = self.lines[self.pos]
            text = line.raw.lstrip(" \t")
            self.pos += 1

    def eol(self, j: int) -> str:
        """The line break that ends line ``j``: none for the frontmatter's last line.

        See "The YAML text" in the module docstring.
        """
        return "\n" if j < len(self.lines) - 1 else ""

    def block(self, header: str, line: _Line, indent: int) -> _Scalar:
        """A ``|`` or ``>`` block scalar, following PyYAML's scan_block_scalar."""
        folded, chomp, rest = header[0] == ">", header[1:2], header[2:]
        if chomp not in ("+", "-"):
            chomp, rest = "", header[1:]
        if rest[:1].isdigit() or rest[:1] in ("+", "-"):
            raise FrontmatterError("block scalar indentation indicators are unsupported", line.number)
        _check_tail(rest, line, "the block scalar indicator")
        lines, j = self.lines, self.pos
        breaks = 0  # line breaks of blank lines not yet added
        width = indent + 1  # the content's indentation: deeper than the key, else the first line's
        while j < len(lines) and lines[j].blank:
            width, breaks, j = max(width, len(lines[j].raw)), breaks + len(self.eol(j)), j + 1
        if j < len(lines):
            width = max(width, lines[j].indent)
        chunks: list[str] = []
        line_break = ""
        if j < len(lines) and lines[j].indent == width:
            while True:
                content = lines[j].raw[width:]
                chunks += ["\n" * breaks, content]
                line_break, breaks, j = self.eol(j), 0, j + 1
                while j < len(lines) and lines[j].blank and len(lines[j].raw) <= width:
                    breaks, j = breaks + len(self.eol(j)), j + 1
                if j == len(lines) or lines[j].indent < width:
                    break
                more_indented = content[:1] in (" ", "\t") or lines[j].raw[width] in (" ", "\t")
                if folded and not more_indented:
                    chunks.append("" if breaks else " ")  # fold: one break becomes a space
                else:
                    chunks.append(line_break)
        if chomp != "-":  # clip keeps the last line break, keep also the blank lines after it
            chunks.append(line_break)
        if chomp == "+":
            chunks.append("\n" * breaks)
        self.pos = j
        return _Scalar("".join(chunks), "str", line.number)

    def flow(self, text: str, line: _Line) -> _Seq:
        """A one-line flow list ``[a, 'b c', "d"]`` of scalars."""
        items: list[_Scalar] = []
        i = _skip(text, 1)
        while text[i : i + 1] != "]":
            if i == len(text) or text[i] == "#":
                raise FrontmatterError("a flow list must close with ']' on its line", line.number)
            if text[i] in "\"'":
                value, rest, _ = self.quoted(text[i:], line, multiline=False)
                items.append(_Scalar(value, "str", line.number))
                i = len(text) - len(rest)
            else:
                items.append(_flow_plain(text, i, line))
                i += len(items[-1].value)
            i = _skip(text, i)
            if text[i : i + 1] == ",":
                i = _skip(text, i + 1)
            elif i < len(text) and text[i] != "]":
                raise FrontmatterError("expected ',' or ']' in flow list", line.number)
        _check_tail(text[i + 1 :], line, "']'")
        return _Seq(tuple(items))


def _flow_plain(text: str, i: int, line: _Line) -> _Scalar:
    """An unquoted flow-list item starting at ``text[i]``, up to ',' or ']'."""
    end = i
    while end < len(text) and text[end] not in ",]":
        end += 1
    item = text[i:end].rstrip(" ")
    if not item:
        raise FrontmatterError("empty item in flow list", line.number)
    if item[0] in "[{}-?:#&*!|>%@`" and not (item[0] == "-" and item[1:2] not in ("", " ")):
        raise FrontmatterError(f"a flow list item cannot start with {item[0]!r}", line.number)
    bad = next((c for c in "[]{}?\t" if c in item), None)
    if bad or " #" in item or ": " in item or item.endswith(":"):
        raise FrontmatterError("unsupported character in flow list item; quote it", line.number)
    return _Scalar(item, _plain_kind(item), line.number)


def _escape(text: str, i: int, line: _Line) -> tuple[str, int]:
    """Decode the double-quote escape at ``text[i]`` (just after the backslash)."""
    ch = text[i]
    if ch in _ESCAPES:
        return _ESCAPES[ch], i + 1
    size = _HEX_ESCAPES.get(ch)
    digits = text[i + 1 : i + 1 + size] if size else ""
    if not size or len(digits) != size or not _HEX.issuperset(digits):
        raise FrontmatterError(f"invalid escape '\\{text[i : i + 1 + (size or 0)]}'", line.number)
    code = int(digits, 16)
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        raise FrontmatterError(f"escape '\\{ch}{digits}' is not a valid character", line.number)
    return chr(code), i + 1 + size


def _key(line: _Line) -> str:
    """The key of a ``key: value`` line, or a reason why the line is not one."""
    match = _KEY.match(line.text)
    if match is None:
        text = line.text
        if _is_item(text):
            reason = "a list item where a 'key: value' line was expected"
        elif text[:1] in ("'", '"', "?"):
            reason = "quoted or complex keys are not supported"
        elif ":" not in text:
            reason = "expected 'key: value'"
        else:
            reason = "unsupported key (use letters, digits, '_', '-', '.', '/'; then ': ')"
        raise FrontmatterError(reason, line.number)
    key = match.group(1)
    kind = _plain_kind(key)
    if kind != "str":
        raise FrontmatterError(f"key '{key}' would be read by YAML as a {kind}", line.number)
    return key


# ------------------------------------------------------------------------- schema

_TOOL_KEYS = ("allowed-tools", "allowed_tools")
_SPEC_OPTIONAL = ("license", "compatibility")  # the Agent Skills spec's; hango does not use them
_KNOWN = frozenset(("name", "description", "metadata", *_TOOL_KEYS, *_SPEC_OPTIONAL))
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _string(node: _Node, what: str, line: int) -> str:
    """A node hango needs as a string; anything else is a reason to reject."""
    if isinstance(node, _Seq):
        raise FrontmatterError(f"'{what}' must be a string, not a list", line)
    if isinstance(node, _Map):
        raise FrontmatterError(f"'{what}' must be a string, not a mapping", line)
    if node.kind == "null":
        raise FrontmatterError(f"'{what}' has no value", line)
    if node.kind != "str":
        raise FrontmatterError(
            f"'{what}': YAML reads {node.value!r} as a {node.kind}, not a string; quote it", line
        )
    return node.value


def _to_frontmatter(root: _Map) -> Frontmatter:
    """Check the parsed mapping against hango's skill schema."""
    entries = root.entries
    warnings: list[str] = []
    for key, (line, _) in entries.items():
        if key not in _KNOWN:
            warnings.append(f"line {line}: key '{key}' is not used by hango; ignored")
    for required in ("name", "description"):
        if required not in entries:
            raise FrontmatterError(f"missing required key '{required}'")
    name_line, name_node = entries["name"]
    name = _check_name(_string(name_node, "name", name_line), name_line, warnings)
    desc_line, desc_node = entries["description"]
    description = _check_description(_string(desc_node, "description", desc_line), desc_line)
    return Frontmatter(
        name=name,
        description=description,
        allowed_tools=_tools(entries),
        metadata=_metadata(entries),
        keys=tuple(entries),
        warnings=tuple(warnings),
    )


def _check_name(name: str, line: int, warnings: list[str]) -> str:
    if not 1 <= len(name) <= NAME_MAX:
        raise FrontmatterError(f"name is {len(name)} characters; it must be 1..{NAME_MAX}", line)
    if not name.isprintable():
        raise FrontmatterError("name must be one line of printable characters", line)
    spec_ok = name == name.lower() and all(c.isalnum() or c == "-" for c in name)
    if not spec_ok or name.startswith("-") or name.endswith("-") or "--" in name:
        warnings.append(
            f"line {line}: name '{name}' breaks the Agent Skills naming rule "
            "(lowercase letters, digits and single inner hyphens)"
        )
    return name


def _check_description(description: str, line: int) -> str:
    if not description.strip():
        raise FrontmatterError("description is empty", line)
    if len(description) > DESCRIPTION_MAX:
        raise FrontmatterError(
            f"description is {len(description)} characters; the limit is {DESCRIPTION_MAX}", line
        )
    if _CONTROL.search(description):
        raise FrontmatterError("description contains control characters", line)
    return description


def _tools(entries: dict[str, tuple[int, _Node]]) -> tuple[str, ...] | None:
    """The tools list from either spelling of the key; None when neither is present."""
    present = [key for key in _TOOL_KEYS if key in entries]
    if not present:
        return None
    if len(present) == 2:
        second = max(entries[key][0] for key in present)
        raise FrontmatterError("both 'allowed-tools' and 'allowed_tools' given; keep one", second)
    key = present[0]
    line, node = entries[key]
    if isinstance(node, _Seq):
        tools = tuple(_string(item, f"{key} item", item.line) for item in node.items)
        if any(not tool.strip() for tool in tools):
            raise FrontmatterError(f"'{key}' has an empty item", line)
        return tools
    if isinstance(node, _Scalar) and node.kind == "null":
        raise FrontmatterError(f"'{key}' has no value; write [] for none or drop the key", line)
    try:
        return split_tools(_string(node, key, line))
    except ValueError as exc:
        raise FrontmatterError(f"'{key}': {exc}", line) from None


def split_tools(text: str) -> tuple[str, ...]:
    """Split a tools string on whitespace and commas outside parentheses.

    ``"Bash(git log:*) Read, Grep"`` gives ``("Bash(git log:*)", "Read", "Grep")``:
    the Agent Skills spec writes a space-separated string, deepagents also splits on
    commas, and a pattern in parentheses stays whole. Raises ValueError on
    unbalanced parentheses.
    """
    tools: list[str] = []
    start = depth = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ValueError("unbalanced ')'")
        elif depth == 0 and (ch.isspace() or ch == ","):
            tools.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError("unbalanced '('")
    tools.append(text[start:])
    return tuple(tool for tool in tools if tool)


def _metadata(entries: dict[str, tuple[int, _Node]]) -> Mapping[str, str] | None:
    """The ``metadata`` map of strings (read-only); None when absent or null."""
    if "metadata" not in entries:
        return None
    line, node = entries["metadata"]
    if isinstance(node, _Scalar) and node.kind == "null":
        return None
    if not isinstance(node, _Map):
        raise FrontmatterError("'metadata' must be a mapping of strings", line)
    values = {k: _string(v, f"metadata.{k}", vline) for k, (vline, v) in node.entries.items()}
    return MappingProxyType(values)
