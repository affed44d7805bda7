"""Every YAML form accepted, every rejection and its reason, caps inclusive, a 16 MB body never read;
both tools spellings accepted alike; `license` and `compatibility` silent, other unknown keys
warned; a head cut inside a character still counts as cut; undecodable bytes refused with their
line.

Table tests for the SKILL.md frontmatter reader: every construct, every rejection.

Each accepted case is also read with PyYAML (``yaml.safe_load``, a test-only
dependency) so an expectation typed here can never drift from what YAML means.
"""

from __future__ import annotations

from typing import Any, SupportsIndex

import pytest
import yaml

from hango.agent import frontmatter
from hango.agent.frontmatter import (
    DESCRIPTION_MAX,
    HEAD_BYTES,
    NAME_MAX,
    Frontmatter,
    FrontmatterError,
    parse,
    split_tools,
)


def doc(frontmatter: str, body: str = "# Body\n\nText.\n") -> str:
    """A SKILL.md: ``---``, the frontmatter lines, ``---``, a body."""
    return f"---\n{frontmatter}\n---\n{body}"


def reject(head: str | bytes) -> FrontmatterError:
    with pytest.raises(FrontmatterError) as info:
        parse(head)
    return info.value


# --------------------------------------------------------------------- accepted

# (id, frontmatter text, expected description) with ``name: demo`` after it, so a
# block scalar is not the last value (that case has its own test below).
DESCRIPTIONS = [
    ("plain", "description: Use it when asked.", "Use it when asked."),
    ("plain trailing comment", "description: Use it   # not this", "Use it"),
    ("hash without space is text", "description: C# and F#", "C# and F#"),
    ("colon without space is text", "description: see http://x.y/z", "see http://x.y/z"),
    ("plain dash inside", "description: a - b", "a - b"),
    ("plain folded over lines", "description: one\n  two\n\n  three # c", "one two\nthree"),
    ("plain on the next line", "description: # later\n  one\n    two", "one two"),
    ("plain continuation looks like a list", "description: foo\n  - x", "foo - x"),
    ("single quoted", "description: 'It''s: fine # here'", "It's: fine # here"),
    ("single quoted, comment after", "description: 'a' # c", "a"),
    (
        "double quoted escapes",
        r'description: "say \"hi\": a\\b\n\tc \u00e9 \x41 \U0001F600 \/"',
        'say "hi": a\\b\n\tc é A \U0001f600 /',
    ),
    ("double quoted, colon inside", 'description: "Triggers include: x"', "Triggers include: x"),
    ("double quoted keeps inner spaces", 'description: "  a  b  "', "  a  b  "),
    ("literal", "description: |\n  a\n   b\n\n  c", "a\n b\n\nc\n"),
    ("literal strip", "description: |-\n  a\n   b\n\n  c", "a\n b\n\nc"),
    ("literal keep", "description: |+\n  a\n\n", "a\n\n\n"),
    (
        "literal with comment on header",
        "description: | # c\n  # not a comment",
        "# not a comment\n",
    ),
    ("literal keeps trailing spaces", "description: |-\n  a  \n  b", "a  \nb"),
    ("folded", "description: >\n  a\n  b\n\n  c\n    d\n  e", "a b\nc\n  d\ne\n"),
    ("folded strip", "description: >-\n  Use when:\n  things # kept", "Use when: things # kept"),
    ("folded keep", "description: >+\n  a\n  b\n", "a b\n\n"),
    ("block on the next line", "description:\n  |\n    a", "a\n"),
    ("unicode", "description: Ünïcödé — 日本語 ✓", "Ünïcödé — 日本語 ✓"),
]


@pytest.mark.parametrize(
    ("frontmatter", "expected"),
    [pytest.param(text, want, id=case) for case, text, want in DESCRIPTIONS],
)
def test_description_forms(frontmatter: str, expected: str) -> None:
    text = f"{frontmatter}\nname: demo"
    assert yaml.safe_load(text)["description"] == expected  # the oracle agrees
    assert parse(doc(text)).description == expected


def test_block_scalar_as_last_value_has_no_final_newline() -> None:
    # The YAML text ends at the newline before the closing '---', as deepagents
    # cuts it and as the corpus records (gemini-cli's agent-tui, string-reviewer).
    for text, expected in [
        ("name: demo\ndescription: >\n  a\n  b", "a b"),
        ("name: demo\ndescription: |\n  a", "a"),
        ("name: demo\ndescription: |+\n  a\n\n", "a\n\n"),
    ]:
        assert yaml.safe_load(text)["description"] == expected
        assert parse(doc(text)).description == expected


TOOLS = [
    (
        "flow list",
        "allowed-tools: [Read, 'Bash(git:*)', \"Web Fetch\"]",
        ("Read", "Bash(git:*)", "Web Fetch"),
    ),
    ("flow list trailing comma", "allowed-tools: [Read, Grep,]  # c", ("Read", "Grep")),
    ("empty flow list", "allowed-tools: []", ()),
    (
        "block list",
        "allowed-tools:\n  - Read\n  - 'Grep' # c\n\n  - Bash(ls:*)",
        ("Read", "Grep", "Bash(ls:*)"),
    ),
    ("indentless block list", "allowed-tools:\n- Read\n- Grep", ("Read", "Grep")),
    (
        "spec string",
        "allowed-tools: Bash(git:*) Bash(jq:*) Read",
        ("Bash(git:*)", "Bash(jq:*)", "Read"),
    ),
    ("commas and a comment", "allowed-tools: Read, Grep     # pre-approved", ("Read", "Grep")),
    ("parentheses keep spaces", "allowed-tools: Bash(git log:*) Read", ("Bash(git log:*)", "Read")),
    ("quoted string", "allowed-tools: 'Read Grep'", ("Read", "Grep")),
    ("empty string", "allowed-tools: ''", ()),
]


@pytest.mark.parametrize(("frontmatter", "expected"), [pytest.param(t, w, id=c) for c, t, w in TOOLS])
def test_tools_forms(frontmatter: str, expected: tuple[str, ...]) -> None:
    fm = parse(doc(f"name: demo\ndescription: d\n{frontmatter}"))
    assert fm.allowed_tools == expected
    assert fm.warnings == ()


def test_tools_absent_is_none_and_empty_is_empty() -> None:
    assert parse(doc("name: demo\ndescription: d")).allowed_tools is None
    assert parse(doc("name: demo\ndescription: d\nallowed-tools: []")).allowed_tools == ()


def test_seed_tools_key_is_accepted_like_the_spec_one() -> None:
    fm = parse(doc("name: demo\ndescription: d\nallowed_tools: [read_file, write_file]"))
    assert fm.allowed_tools == ("read_file", "write_file")
    assert fm.warnings == ()


def test_split_tools() -> None:
    assert split_tools(" a,b ,, c\nd ") == ("a", "b", "c", "d")
    assert split_tools("Bash(a, b) X") == ("Bash(a, b)", "X")
    for bad in ("Bash(git", "a)"):
        with pytest.raises(ValueError):
            split_tools(bad)


def test_metadata_map() -> None:
    fm = parse(
        doc(
            "name: demo\ndescription: d\nmetadata:\n"
            "  short-description: Fix CI  # c\n  # comment\n  version: '1.0'\n  note: \"a: b\""
        )
    )
    assert fm.metadata == {"short-description": "Fix CI", "version": "1.0", "note": "a: b"}
    with pytest.raises(TypeError):
        fm.metadata["x"] = "y"  # type: ignore[index]  # read-only
    assert parse(doc("name: demo\ndescription: d")).metadata is None
    assert parse(doc("name: demo\ndescription: d\nmetadata:")).metadata is None


def test_line_endings_bom_and_closing_forms() -> None:
    expected = parse(doc("name: demo\ndescription: d"))
    crlf = "---\r\nname: demo\r\ndescription: d\r\n---\r\nbody\r\n"
    assert parse(crlf) == expected
    assert parse("\ufeff" + crlf) == expected
    assert parse(b"\xef\xbb\xbf" + crlf.encode()) == expected
    assert parse("---\nname: demo\ndescription: d\n---") == expected  # closes at EOF
    assert parse("---  \nname: demo\ndescription: d\n---  \n") == expected  # trailing spaces
    assert parse(doc("name: demo\ndescription: d").encode()) == expected
    assert parse(bytearray(doc("name: demo\ndescription: d").encode())) == expected  # type: ignore[arg-type]


def test_comments_and_blank_lines_anywhere_outside_values() -> None:
    fm = parse(doc("# leading\n\nname: demo # trailing\n   # indented\n\ndescription: d\n# last"))
    assert (fm.name, fm.description) == ("demo", "d")


def test_unknown_keys_are_read_then_ignored_with_a_warning_spec_keys_silently() -> None:
    fm = parse(
        doc(
            "name: demo\nlicense: MIT\ndescription: d\ncompatibility:\n  - claude-code\n"
            "version: 1.0\nhooks:\n  pre: 'x'\n  post: [a, b]\ndisable-model-invocation: true"
        )
    )
    assert fm.keys == (
        "name", "license", "description", "compatibility", "version", "hooks",
        "disable-model-invocation",
    )  # fmt: skip
    assert fm.warnings == (  # license and compatibility are the spec's own optional fields
        "line 7: key 'version' is not used by hango; ignored",
        "line 8: key 'hooks' is not used by hango; ignored",
        "line 11: key 'disable-model-invocation' is not used by hango; ignored",
    )


def test_name_outside_the_spec_rule_is_only_a_warning() -> None:
    fm = parse(doc("name: code_explorer\ndescription: d"))
    assert fm.name == "code_explorer"
    assert fm.warnings == (
        "line 2: name 'code_explorer' breaks the Agent Skills naming rule "
        "(lowercase letters, digits and single inner hyphens)",
    )
    for name in ("Demo", "-demo", "demo-", "de--mo"):
        assert len(parse(doc(f"name: {name}\ndescription: d")).warnings) == 1
    for name in ("demo", "pdf-2", "café"):
        assert parse(doc(f"name: {name}\ndescription: d")).warnings == ()


def test_limits_are_inclusive() -> None:
    fm = parse(doc(f"name: {'a' * NAME_MAX}\ndescription: {'d' * DESCRIPTION_MAX}"))
    assert (len(fm.name), len(fm.description)) == (NAME_MAX, DESCRIPTION_MAX)


def test_result_is_frozen_and_hashable() -> None:
    fm = parse(doc("name: demo\ndescription: d\nmetadata:\n  a: b"))
    assert isinstance(fm, Frontmatter)
    with pytest.raises(AttributeError):
        fm.name = "other"  # type: ignore[misc]
    hash(fm)


# -------------------------------------------------------------------- rejected

D = "description: d"
N = "name: demo"

# (id, whole file, reason fragment, line)
REJECTIONS: list[tuple[str, str | bytes, str, int | None]] = [
    ("no frontmatter", "name: demo\n", "no frontmatter", 1),
    ("empty file", "", "no frontmatter", 1),
    ("not closed", "---\nname: demo\n", "frontmatter not closed: no closing '---' line", 1),
    ("invalid UTF-8", b"---\nname: demo\ndescription: \xff\n---\n", "not valid UTF-8", 3),
    ("control character", doc(f"{N}\ndescription: a\x07b"), "unsupported character U+0007", 3),
    ("bare carriage return", doc(f"{N}\ndescription: a\rb"), "U+000D", 3),
    ("unicode line separator", doc(f"{N}\ndescription: a\u2028b"), "U+2028", 3),
    ("second document", doc(f"{N}\n--- x\n{D}"), "expected 'key: value'", 3),
    ("document end marker", doc(f"{N}\n{D}\n..."), "expected 'key: value'", 4),
    ("tab indentation", doc(f"{N}\n{D}\nmetadata:\n\ta: b"), "tab in indentation", 5),
    ("tab after colon", doc(f"name:\tdemo\n{D}"), "tab after ':'", 2),
    ("tab in plain value", doc(f"{N}\ndescription: a\tb"), "tab inside an unquoted value", 3),
    ("anchor", doc(f"{N}\ndescription: &a text"), "anchors", 3),
    ("alias", doc(f"{N}\ndescription: *a"), "aliases", 3),
    ("tag", doc(f"{N}\ndescription: !!str text"), "tags", 3),
    ("flow map", doc(f"{N}\n{D}\nmetadata: {{a: b}}"), "flow mappings", 4),
    ("duplicate key", doc(f"{N}\n{D}\nname: other"), "duplicate key 'name' (first on line 2)", 4),
    ("duplicate nested key", doc(f"{N}\n{D}\nmetadata:\n  a: b\n  a: c"), "duplicate key 'a'", 6),
    ("name is a bool", doc(f"name: yes\n{D}"), "'name': YAML reads 'yes' as a bool", 2),
    ("name is an int", doc(f"name: 123\n{D}"), "as a int", 2),
    ("name is a float", doc(f"name: 1.5\n{D}"), "as a float", 2),
    ("name is a date", doc(f"name: 2024-01-01\n{D}"), "as a timestamp", 2),
    ("name is null", doc(f"name: ~\n{D}"), "'name' has no value", 2),
    ("name is empty", doc(f"name:\n{D}"), "'name' has no value", 2),
    ("name is a list", doc(f"name: [a]\n{D}"), "'name' must be a string, not a list", 2),
    ("name is a mapping", doc(f"name:\n  a: b\n{D}"), "not a mapping", 2),
    ("name too long", doc(f"name: {'a' * 65}\n{D}"), "name is 65 characters; it must be 1..64", 2),
    ("name empty string", doc(f"name: ''\n{D}"), "name is 0 characters", 2),
    ("name on two lines", doc(f'name: "a\\nb"\n{D}'), "one line of printable", 2),
    (
        "description too long",
        doc(f"{N}\ndescription: {'d' * 1025}"),
        "1025 characters; the limit is 1024",
        3,
    ),
    ("description blank", doc(f"{N}\ndescription: ' '"), "description is empty", 3),
    ("description control", doc(f'{N}\ndescription: "a\\eb"'), "control characters", 3),
    ("description is a bool", doc(f"{N}\ndescription: off"), "as a bool", 3),
    (
        "colon in plain value",
        doc(f"{N}\ndescription: Use when: asked"),
        "': ' inside an unquoted value",
        3,
    ),
    ("colon at end of plain", doc(f"{N}\ndescription: Use when:"), "': ' inside", 3),
    ("colon on a continuation line", doc(f"{N}\ndescription: a\n  b: c"), "': ' inside", 4),
    ("missing name", doc(D), "missing required key 'name'", None),
    ("missing description", doc(N), "missing required key 'description'", None),
    ("empty frontmatter", "---\n---\n", "missing required key 'name'", None),
    ("both tools keys", doc(f"{N}\n{D}\nallowed-tools: a\nallowed_tools: b"), "both", 5),
    ("tools null", doc(f"{N}\n{D}\nallowed-tools:"), "has no value; write [] for none", 4),
    ("tools nested list", doc(f"{N}\n{D}\nallowed-tools: [a, [b]]"), "item '[b' needs quotes", 4),
    ("tools empty flow item", doc(f"{N}\n{D}\nallowed-tools: [a, , b]"), "empty item", 4),
    ("tools unclosed flow", doc(f"{N}\n{D}\nallowed-tools: [a, b"), "must close with ']'", 4),
    ("tools multi-line flow", doc(f"{N}\n{D}\nallowed-tools: [a,\n  b]"), "must close", 4),
    ("tools text after ]", doc(f"{N}\n{D}\nallowed-tools: [a] b"), "after ']'", 4),
    ("tools int item", doc(f"{N}\n{D}\nallowed-tools:\n  - 1"), "YAML reads '1' as a int", 5),
    ("tools empty item", doc(f"{N}\n{D}\nallowed-tools: ['']"), "has an empty item", 4),
    ("tools null item", doc(f"{N}\n{D}\nallowed-tools:\n  -\n  - a"), "empty list item", 5),
    (
        "tools item on next line",
        doc(f"{N}\n{D}\nallowed-tools:\n  -\n    a"),
        "write the item on its '-' line",
        5,
    ),
    (
        "tools list of maps",
        doc(f"{N}\n{D}\nallowed-tools:\n  - a: b"),
        "list items must be scalars",
        5,
    ),
    ("tools unbalanced", doc(f"{N}\n{D}\nallowed-tools: Bash(git"), "unbalanced or nested", 4),
    ("tools is a map", doc(f"{N}\n{D}\nallowed-tools:\n  a: b"), "not a mapping", 4),
    (
        "metadata float",
        doc(f"{N}\n{D}\nmetadata:\n  version: 1.0"),
        "'metadata.version': YAML reads '1.0'",
        5,
    ),
    ("metadata bool", doc(f"{N}\n{D}\nmetadata:\n  country: NO"), "as a bool", 5),
    (
        "metadata nested",
        doc(f"{N}\n{D}\nmetadata:\n  a:\n    b: c"),
        "'metadata.a' holds a nested mapping; hango reads one level of keys",
        5,
    ),
    ("metadata list", doc(f"{N}\n{D}\nmetadata: [a]"), "'metadata' must be a mapping", 4),
    ("unknown key, anchor", doc(f"{N}\n{D}\nx: &a b"), "anchors", 4),
    (
        "unknown key, list of maps",
        doc(f"{N}\n{D}\nhooks:\n  - a: b"),
        "list items must be scalars",
        5,
    ),
    ("indentation indicator", doc(f"{N}\ndescription: |2\n   a"), "indentation indicators", 3),
    (
        "text after block header",
        doc(f"{N}\ndescription: |x\n  a"),
        "after the block scalar indicator",
        3,
    ),
    (
        "unterminated quote",
        doc(f"{N}\ndescription: 'abc\n  def"),
        "the '-quoted value does not close on its line",
        3,
    ),
    ("text after quote", doc(f'{N}\ndescription: "a" b'), "after the closing quote", 3),
    ("comment glued to quote", doc(f'{N}\ndescription: "a"#c'), "after the closing quote", 3),
    ("unknown escape", doc(f'{N}\ndescription: "a\\qb"'), "invalid escape '\\q'", 3),
    ("short hex escape", doc(f'{N}\ndescription: "\\u12"'), "invalid escape '\\u'", 3),
    ("surrogate escape", doc(f'{N}\ndescription: "\\ud800"'), "not a valid character", 3),
    ("indented top level", doc(f"  {N}\n  {D}"), "top-level keys must not be indented", 2),
    (
        "stray indentation",
        doc(f"{N}\n{D}\nallowed-tools: [a]\n  more"),
        "unexpected indentation",
        5,
    ),
    ("empty block scalar", doc(f"{N}\ndescription: |"), "description is empty", 3),
    (
        "continuation after comment",
        doc(f"{N}\ndescription: a # c\n  b"),
        "unexpected indentation",
        4,
    ),
    ("continuation after quote", doc(f"{N}\ndescription: 'a'\n  b"), "unexpected indentation", 4),
    ("list where a key belongs", doc(f"{N}\n{D}\n- a"), "a list item where a 'key: value' line", 4),
    (
        "list on the key line",
        doc(f"{N}\n{D}\nallowed-tools: - a"),
        "must start on the line after",
        4,
    ),
    ("bool key", doc(f"{N}\n{D}\nyes: x"), "key 'yes' would be read by YAML as a bool", 4),
    ("quoted key", doc(f'{N}\n{D}\n"k": v'), "a key is letters, digits", 4),
    ("complex key", doc(f"{N}\n{D}\n? k"), "expected 'key: value'", 4),
    ("key with a space", doc(f"{N}\n{D}\nmy key: v"), "expected 'key: value'", 4),
    ("not a key", doc(f"{N}\n{D}\njust text"), "expected 'key: value'", 4),
    ("reserved start", doc(f"{N}\ndescription: @me"), "'@' cannot start a value", 3),
    (
        "too deep",
        doc(f"{N}\n{D}\n" + "".join(f"{' ' * i}k{i}:\n" for i in range(10)) + " " * 10 + "v: x"),
        "'k0.k1' holds a nested mapping",
        5,
    ),
    # Valid YAML outside the slice hango reads: refused with a reason, never read differently.
    ("quoted over lines", doc(f"{N}\ndescription: 'a\n  b'"), "does not close on its line", 3),
    (
        "double quoted escaped break",
        doc(f'{N}\ndescription: "a \\\n  b"'),
        "quoted values must fit on one line; for long text use a block scalar",
        3,
    ),
    ("unknown key, map nested twice", doc(f"{N}\n{D}\nhooks:\n  pre:\n    cmd: x"), "'hooks.pre'", 5),
    # What the author meant, in the message.
    (
        "curly quotes",
        doc(f"{N}\ndescription: \u201cUse it: when asked\u201d"),
        "curly (smart) quotes do not quote a value in YAML; use straight quotes",
        3,
    ),
    ("curly single quotes", doc(f"{N}\ndescription: \u2018Use it\u2019"), "curly (smart) quotes", 3),
    (
        "tools in parentheses",
        doc(f"{N}\n{D}\nallowed-tools: (read_file, ls)"),
        "'allowed-tools': '(read_file, ls)' is not a tool name (parentheses follow a tool name, as "
        "in Bash(git:*)); to list tools, separate them with spaces: allowed-tools: read_file ls",
        4,
    ),
    ("tools in parentheses, a list", doc(f"{N}\n{D}\nallowed_tools: ['(ls)']"), "'(ls)' is not a tool", 4),
]


@pytest.mark.parametrize(
    ("head", "fragment", "line"),
    [pytest.param(head, frag, line, id=case) for case, head, frag, line in REJECTIONS],
)
def test_rejections(head: str | bytes, fragment: str, line: int | None) -> None:
    error = reject(head)
    assert fragment in error.reason
    assert error.line == line
    assert str(error) == (error.reason if line is None else f"line {line}: {error.reason}")


def test_a_tab_in_indentation_is_refused_with_the_whole_reason_and_its_own_line() -> None:
    """A blank first line before it and lines after it do not move the line number."""
    error = reject(doc(f"\n{N}\nmetadata:\n\ta: b\n{D}"))
    assert str(error) == "line 5: tab in indentation; indent with spaces"


def test_an_internal_failure_still_surfaces_as_a_frontmatter_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The loader relies on "parse raises only FrontmatterError"; a bug must not escape.
    def broken(entries: object) -> None:
        raise IndexError("bug")

    monkeypatch.setattr(frontmatter, "_schema", broken)
    error = reject(doc("name: demo\ndescription: d"))
    assert error.reason == "internal error while reading frontmatter: IndexError('bug')"
    assert isinstance(error.__cause__, IndexError)


def test_non_text_input_is_a_frontmatter_error() -> None:
    error = reject(123)  # type: ignore[arg-type]
    assert error.reason == "expected str or bytes, got int"


# ------------------------------------------------------------------------ head

VALID = doc("name: demo\ndescription: d\nallowed-tools: [Read]", body="")


class GuardedBytes(bytes):
    """Bytes that allow only a slice within the head; any other use fails the test."""

    def __getitem__(self, key: Any) -> Any:
        assert isinstance(key, slice) and key.start is None and key.stop == HEAD_BYTES, key
        return bytes(super().__getitem__(key))

    def __getattribute__(self, attr: str) -> object:
        if attr not in ("__getitem__", "__class__"):
            raise AssertionError(f"parse touched the whole input via {attr}")
        return super().__getattribute__(attr)


class GuardedStr(str):
    """The same guard for ``str`` input."""

    def __getitem__(self, key: SupportsIndex | slice) -> str:
        assert isinstance(key, slice) and key.start is None and key.stop == HEAD_BYTES, key
        return str(super().__getitem__(key))

    def __getattribute__(self, attr: str) -> object:
        if attr not in ("__getitem__", "__class__"):
            raise AssertionError(f"parse touched the whole input via {attr}")
        return super().__getattribute__(attr)


def huge_body() -> bytes:
    """16 MB that would be rejected if read: invalid UTF-8, NULs, an open quote, '---'."""
    chunk = b"\xff\x00 'unclosed\n---\nname: evil\n" * 64
    return chunk * (16 * 1024 * 1024 // len(chunk))


def test_a_16mb_body_is_never_read() -> None:
    small = parse(VALID)
    body = huge_body()
    assert len(body) >= 16 * 1024 * 1024 - 2048
    assert parse(VALID.encode() + body) == small
    assert parse(VALID + body.decode("latin-1")) == small
    # Structural: parse may only take head[:HEAD_BYTES]; any other access fails.
    assert parse(GuardedBytes(VALID.encode() + body)) == small
    assert parse(GuardedStr(VALID + body.decode("latin-1"))) == small


def test_the_guards_do_catch_a_whole_input_read() -> None:
    # The guards above must be able to fail, or the test proves nothing.
    guarded = GuardedBytes(b"---\n")
    with pytest.raises(AssertionError):
        guarded.split(b"\n")
    with pytest.raises(AssertionError):
        guarded[:10]
    with pytest.raises(AssertionError):
        GuardedStr("abc").encode()


def padded(total: int, *, closing: str = "---\n") -> bytes:
    """A frontmatter whose closing line ends exactly at byte ``total``."""
    start = "---\nname: demo\ndescription: d\n"
    filler = total - len(start) - len(closing.encode())
    lines = []
    while filler > 0:
        width = min(filler, 100)
        lines.append(("#" + "x" * (width - 2) + "\n") if width >= 2 else "\n")
        filler -= width
    return (start + "".join(lines) + closing).encode()


def test_frontmatter_closing_inside_the_head_is_read() -> None:
    head = padded(HEAD_BYTES)
    assert len(head) == HEAD_BYTES
    assert parse(head + b"body " * 10000).name == "demo"


def test_frontmatter_not_closed_within_the_head_is_rejected() -> None:
    head = padded(HEAD_BYTES + 4)  # the closing '---\n' starts at HEAD_BYTES
    error = reject(head)
    assert error.reason == f"frontmatter not closed within the first {HEAD_BYTES} bytes"
    assert error.line == 1


def test_a_closing_line_cut_by_the_head_is_not_trusted() -> None:
    # In the file the line is '----x' (not a marker); the head ends after '---'.
    head = padded(HEAD_BYTES + 6, closing="---x\n---\n")[:HEAD_BYTES]
    assert head.endswith(b"---")
    assert "not closed within" in reject(head).reason


def test_a_head_decoded_without_its_cut_character_is_still_cut() -> None:
    # A caller reads HEAD_BYTES bytes and decodes them, dropping a character cut in
    # two. The line '---é' then looks like '---', but it is not a closing line.
    data = padded(HEAD_BYTES + 6, closing="---é\n---\n")[:HEAD_BYTES]
    assert data.endswith(b"---\xc3")
    head = data[:-1].decode("utf-8")
    assert head.endswith("---")
    assert "not closed within" in reject(head).reason


def test_undecodable_bytes_passed_as_surrogates_are_refused_with_their_line() -> None:
    raw = b"---\nname: demo\ndescription: caf\xe9\n---\n"
    error = reject(raw.decode("utf-8", "surrogateescape"))
    assert (error.reason, error.line) == ("not valid UTF-8", 3)
    body = b"\xff\xfe not text"
    assert parse((VALID.encode() + body).decode("utf-8", "surrogateescape")) == parse(VALID)


def test_a_character_cut_by_the_head_is_harmless() -> None:
    data = VALID.encode() + "é".encode() * HEAD_BYTES
    assert parse(data) == parse(VALID)
    assert parse(data.decode()) == parse(VALID)


def test_a_reason_quotes_a_long_value_cut_short() -> None:
    # A reason lands in warnings, events and logs: it quotes the value, never 16 KiB of it.
    for head in (
        doc(f"name: {'1' * 5000}\ndescription: d"),
        doc(f"name: demo\ndescription: d\nallowed-tools: ({'read_file ' * 500})"),
        doc(f"name: demo\ndescription: d\nallowed-tools: [{'a: ' * 500}]"),
    ):
        error = reject(head)
        assert len(error.reason) < 300 and "..." in error.reason, error.reason


# A rejection's reason is what the skill's author reads (``skill ... skipped: <reason>``): the
# whole sentence, with the key it names and the line, not only a fragment of it.
WHOLE_REASONS = [
    ("name: demo\n", "line 1: no frontmatter: the file must start with a '---' line"),
    (doc(f'name: "a\\nb"\n{D}'), "line 2: name must be one line of printable characters"),
    (doc(f"{N}\ndescription: 123"),
     "line 3: 'description': YAML reads '123' as a int, not a string; quote it"),
    (doc(f"{N}\ndescription: ' '"), "line 3: description is empty"),
    (doc(f'{N}\ndescription: "a\\eb"'), "line 3: description contains control characters"),
    (doc(f"{N}\n{D}\nallowed-tools: a\nallowed_tools: b"),
     "line 5: both 'allowed-tools' and 'allowed_tools' given; keep one"),
    (doc(f"{N}\n{D}\nallowed-tools:\n  - 1"),
     "line 5: 'allowed-tools item': YAML reads '1' as a int, not a string; quote it"),
    (doc(f"{N}\n{D}\nallowed-tools: 5"),
     "line 4: 'allowed-tools': YAML reads '5' as a int, not a string; quote it"),
    (doc(f"{N}\n{D}\nallowed-tools: Bash(git"),
     "line 4: unbalanced or nested parentheses in the tools"),
    (doc(f"{N}\n{D}\nmetadata: [a]"), "line 4: 'metadata' must be a mapping of strings"),
    (doc(f"{N}\n{D}\nmetadata:\n  a: 1"),
     "line 5: 'metadata.a': YAML reads '1' as a int, not a string; quote it"),
]


@pytest.mark.parametrize(("head", "reason"), WHOLE_REASONS)
def test_a_rejection_says_the_whole_reason(head: str, reason: str) -> None:
    assert str(reject(head)) == reason


def test_a_head_four_bytes_short_of_the_cap_is_whole() -> None:
    """A head shorter than ``HEAD_BYTES - 3`` was not cut: its last line, a closing ``---`` with
    no newline after it, is trusted. One byte more and the head may have been cut mid-line."""
    head = padded(HEAD_BYTES - 4, closing="---")
    assert len(head) == HEAD_BYTES - 4 and head.endswith(b"\n---")
    assert parse(head).name == "demo"
    longer = padded(HEAD_BYTES - 3, closing="---")
    assert reject(longer).reason == f"frontmatter not closed within the first {HEAD_BYTES} bytes"


@pytest.mark.parametrize(("head", "reason"), [
    (b"---\nname: demo\ndescription: \xff\nlicense: MIT\n---\n", "line 3: not valid UTF-8"),
    (b"---\n\nname: demo\ndescription: \xff\n---\n", "line 4: not valid UTF-8"),
    (doc(f"{N}\ndescription: a\x07b\nlicense: MIT"), "line 3: unsupported character U+0007"),
    (doc(f"\n{N}\ndescription: a\x07b"), "line 4: unsupported character U+0007"),
])
def test_a_bad_character_is_named_on_its_own_line(head: str | bytes, reason: str) -> None:
    """The line counts the lines before the character (a blank first line too), not the
    frontmatter's every line."""
    assert str(reject(head)) == reason
