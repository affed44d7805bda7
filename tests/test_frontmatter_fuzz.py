"""Random bytes, YAML-ish text and mutated corpus files: read as PyYAML does or rejected, never
misread; worst cases stay fast.

Property tests for the frontmatter reader (hypothesis).

Three promises, checked on random input:

1. ``parse`` raises nothing but ``FrontmatterError`` and never hangs (random bytes,
   random YAML-ish text, mutated corpus files, a few worst cases).
2. Whenever hango accepts a file, PyYAML reads the same frontmatter to the same
   values: never a different value.
3. On generated frontmatter in the supported subset, hango accepts exactly when the
   values PyYAML reads satisfy hango's rules, and then reads the same values.

The default run is a few hundred examples per test; set ``HANGO_FUZZ_EXAMPLES`` (for
example 20000) for a dedicated long run.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hango.agent.frontmatter import (
    DESCRIPTION_MAX,
    HEAD_BYTES,
    NAME_MAX,
    Frontmatter,
    FrontmatterError,
    parse,
    split_tools,
)

EXAMPLES = int(os.environ.get("HANGO_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=timedelta(seconds=2),  # a parse of at most 16 KiB takes milliseconds
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CORPUS = Path(__file__).resolve().parent / "data" / "skills-corpus" / "files"
CORPUS_FILES = [path.read_bytes() for path in sorted(CORPUS.rglob("SKILL.md"))]


def outcome(head: str | bytes) -> Frontmatter | FrontmatterError:
    """Parse; anything but a FrontmatterError escapes and fails the test."""
    try:
        return parse(head)
    except FrontmatterError as error:
        assert not error.reason.startswith("internal error"), error.reason
        return error


# ---------------------------------------------------------------------- oracle


class Unbuildable:
    """A scalar ``yaml.safe_load`` cannot construct (``=``, ``<<``, a bad date)."""

    def __init__(self, text: str) -> None:
        self.text = text


class Oracle(yaml.SafeLoader):
    """``yaml.safe_load``, except that an unconstructable scalar becomes a marker.

    safe_load fails the whole document on ``license: 2024-13-45``; hango ignores an
    unknown key's value, so the comparison needs the other keys' values anyway.
    Wherever safe_load succeeds, this loader returns exactly what it returns.
    """


def _timestamp(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> object:
    try:
        return yaml.SafeLoader.construct_yaml_timestamp(loader, node)
    except ValueError:
        return Unbuildable(node.value)


Oracle.add_constructor("tag:yaml.org,2002:timestamp", _timestamp)
for _tag in ("tag:yaml.org,2002:value", "tag:yaml.org,2002:merge"):
    Oracle.add_constructor(_tag, lambda loader, node: Unbuildable(node.value))


def yaml_text(head: str | bytes) -> str | None:
    """The frontmatter text hango reads (lines between the markers, no final newline)."""
    data = (head.encode("utf-8", "surrogatepass") if isinstance(head, str) else head)[:HEAD_BYTES]
    lines = [line.removesuffix(b"\r") for line in data.removeprefix(b"\xef\xbb\xbf").split(b"\n")]
    markers = [i for i, line in enumerate(lines) if line.rstrip(b" \t") == b"---"]
    if len(markers) < 2 or markers[0] != 0:
        return None
    return b"\n".join(lines[1 : markers[1]]).decode("utf-8")


def yaml_load(text: str) -> Any:
    try:
        return yaml.load(text, Loader=Oracle)  # a SafeLoader subclass: safe
    except yaml.YAMLError:
        return Unbuildable(text)


def yaml_tools(data: dict[Any, Any]) -> tuple[str, ...] | None:
    value = data.get("allowed-tools", data.get("allowed_tools"))
    if value is None and not ("allowed-tools" in data or "allowed_tools" in data):
        return None
    return split_tools(value) if isinstance(value, str) else tuple(value)


def assert_same_as_yaml(head: str | bytes, fm: Frontmatter) -> None:
    """hango accepted ``head``: PyYAML must read the same values from it."""
    text = yaml_text(head)
    assert text is not None
    data = yaml_load(text)
    assert isinstance(data, dict), f"hango accepted what YAML reads as {data!r}"
    assert list(data) == list(fm.keys)
    assert data["name"] == fm.name and isinstance(data["name"], str)
    assert data["description"] == fm.description and isinstance(data["description"], str)
    assert yaml_tools(data) == fm.allowed_tools
    metadata = None if fm.metadata is None else dict(fm.metadata)
    assert data.get("metadata") == metadata


def acceptable(data: Any) -> bool:
    """Whether hango's rules accept these PyYAML values (the rules, restated)."""
    if not isinstance(data, dict) or not all(isinstance(key, str) for key in data):
        return False
    name, description = data.get("name"), data.get("description")
    if not isinstance(name, str) or not 1 <= len(name) <= NAME_MAX or not name.isprintable():
        return False
    if not isinstance(description, str) or not description.strip():
        return False
    if len(description) > DESCRIPTION_MAX:
        return False
    if any((c < " " and c not in "\n\t") or "\x7f" <= c <= "\x9f" for c in description):
        return False
    if "allowed-tools" in data and "allowed_tools" in data:
        return False
    tools = data.get("allowed-tools", data.get("allowed_tools", []))
    if isinstance(tools, str):
        try:
            tools = list(split_tools(tools))
        except ValueError:
            return False
    if not isinstance(tools, list) or not all(isinstance(t, str) and t.strip() for t in tools):
        return False
    if any(t.startswith("(") for t in tools):  # "(read_file, ls)" is not a tool name
        return False
    metadata = data.get("metadata")
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
    ):
        return False
    return all(isinstance(k, str) for k in (metadata or {}))


# ------------------------------------------------------------ 1. never crashes

YAMLISH = st.sampled_from(
    [*"abz09 :-#'\"|>[]{},&*!%@`\\?~.\t\r\n+é—日", "\u2028", "\x85", "\x00", "\ufeff",
     ": ", " #", "- ", "---", "...", "  ", "\\u00e9", "''"]
)  # fmt: skip


@FUZZ
@given(st.binary(max_size=3000))
def test_random_bytes(data: bytes) -> None:
    for head in (data, b"---\n" + data, b"---\nname: a\ndescription: b\n" + data + b"\n---\n"):
        result = outcome(head)
        if isinstance(result, Frontmatter):
            assert_same_as_yaml(head, result)


@FUZZ
@given(st.lists(YAMLISH, max_size=300).map("".join))
def test_random_yamlish_text(text: str) -> None:
    for head in (text, f"---\n{text}\n---\n", f"---\nname: a\n{text}\n---\n"):
        result = outcome(head)
        if isinstance(result, Frontmatter):
            assert_same_as_yaml(head, result)


JUNK = st.binary(max_size=6) | st.sampled_from(
    [b":", b": ", b" #", b"'", b'"', b"\t", b"|", b">-", b"- ", b"[", b"]", b"{", b"\\",
     b"\r", b"\xff", b"\xc3", b"  ", b"&a ", b"*a", b"!!str ", b"---", b"yes", b"1.0", b"~"]
)  # fmt: skip


@st.composite
def mutated_corpus_file(draw: st.DrawFn) -> bytes:
    """A real SKILL.md with lines deleted, duplicated, swapped, re-indented or spiked."""
    lines = draw(st.sampled_from(CORPUS_FILES)).split(b"\n")
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "insert", "indent", "truncate"]))
        i = draw(st.integers(0, len(lines) - 1))
        if op == "delete" and len(lines) > 1:
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "insert":
            at = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:at] + draw(JUNK) + lines[i][at:]
        elif op == "indent":
            lines[i] = b" " * draw(st.integers(1, 4)) + lines[i]
        elif op == "truncate":
            whole = b"\n".join(lines)
            lines = whole[: draw(st.integers(0, len(whole)))].split(b"\n")
    return b"\n".join(lines)


@FUZZ
@given(mutated_corpus_file())
def test_mutated_corpus_files(data: bytes) -> None:
    assert CORPUS_FILES, "the skills corpus is missing"
    result = outcome(data)
    event("accepted" if isinstance(result, Frontmatter) else "rejected")
    if isinstance(result, Frontmatter):
        assert_same_as_yaml(data, result)


def test_worst_cases_stay_fast() -> None:
    n = HEAD_BYTES // 2
    cases = [
        "---\n" + "a" * HEAD_BYTES,
        "---\nx: " + "[" * n,
        "---\nx: '" + "''" * (n // 2),
        '---\nx: "' + "a " * (n // 2) + '"\n---\n',
        "---\nx: [" + "a," * (n // 2) + "]\n---\n",
        "---\nx: |\n" + "  \n" * (n // 3) + "---\n",
        "---\nx: >\n" + "  a\n" * (n // 4) + "---\n",
        "---\nx: a\n" + "  b\n" * (n // 4) + "---\n",
        "---\n" + "".join(f"{' ' * i}k:\n" for i in range(150)) + "---\n",
        "---\nx: 0" + ":0" * (n // 2) + "\n---\n",
        "---\nx: " + "1" * n + "\n---\n",
        "---\n" + "#\n" * n + "---\n",
        "---\n" + "- a\n" * (n // 4) + "---\n",
        "---\nname: a\ndescription: '" + " " * n + "a'\n---\n",
        "---\nname: a\ndescription: x\n" + " y #\n" * (n // 5) + "---\n",
    ]
    for head in cases:
        start = time.perf_counter()
        outcome(head)
        assert time.perf_counter() - start < 2.0, head[:40]


# --------------------------------------------------------- 2./3. differential

PLAIN_WORDS = st.sampled_from(
    ["Use", "this", "skill", "when", "PDF", "(x)", "a,b", "C#", "http://x.y", "~", "1.0", "yes",
     "No", "null", "2024-01-01", "0x1F", "1_000", "-dash", "a-b", "é", "日本", "—", "'q'", '"q"',
     "x:y", "[b]", "{c}", "%", "@", "!", "&", "*"]
)  # fmt: skip
PRINTABLE = st.characters(
    blacklist_categories=("Cs", "Cc", "Zl", "Zp"), blacklist_characters="\x85\ufeff\ufffe\uffff"
)
TEXT = st.text(PRINTABLE | st.sampled_from(list(" :#'\"\\-,[]{}|>\n")), max_size=40)


PHRASES = st.lists(PLAIN_WORDS, min_size=1, max_size=6).map(" ".join) | TEXT
SPEC_NAMES = st.from_regex(r"[a-z][a-z0-9]{0,20}(-[a-z0-9]{1,10}){0,3}", fullmatch=True)
NAMES = st.one_of(SPEC_NAMES, SPEC_NAMES, TEXT)


def plain_ok(text: str) -> bool:
    """Text hango reads as a plain scalar (else a quoted form is generated)."""
    return bool(
        text
        and text[0] not in "-?:,[]{}#&*!|>'\"%@` \u201c\u201d\u2018\u2019\u201e"  # curly quotes: refused
        and text == text.strip(" ")
        and ": " not in text
        and " #" not in text
        and not text.endswith(":")
        and "\t" not in text
        and all(c.isprintable() for c in text)
    )


def double_quoted(text: str, draw: st.DrawFn) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif not ch.isprintable() or draw(st.integers(0, 9)) == 0:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def wrap(rendered: str, indent: str, draw: st.DrawFn) -> str:
    """Break a one-line scalar at a space, maybe leaving spaces around the break."""
    spaces = [i for i, ch in enumerate(rendered) if ch == " " and 0 < i < len(rendered) - 1]
    if not spaces or not draw(st.booleans()):
        return rendered
    at = draw(st.sampled_from(spaces))
    before = draw(st.sampled_from(["", " ", "  "]))  # spaces at a break are dropped
    blank = draw(st.sampled_from(["", "\n", "\n  \n"]))
    return rendered[:at] + before + "\n" + blank + indent + rendered[at + 1 :]


@st.composite
def scalar(draw: st.DrawFn, indent: str = "", texts: st.SearchStrategy[str] = PHRASES) -> str:
    """A scalar rendered plain, quoted or as a block scalar, as text after ``key:``."""
    text = draw(texts)
    style = draw(st.sampled_from(["plain", "single", "double", "block", "next-line"]))
    deeper = indent + "  "
    if style == "plain" and plain_ok(text):
        return " " + wrap(text, deeper, draw)
    if style == "next-line" and plain_ok(text):
        return "\n" + deeper + wrap(text, deeper, draw)
    if style == "block" and "\n" not in text and "\r" not in text:
        texts = st.lists(TEXT | st.just(""), min_size=1, max_size=5)
        lines = [line.replace("\n", " ") for line in draw(texts)]
        lines = [line.rstrip() if line.strip() else "" for line in lines] or ["x"]
        lines[0] = lines[0].lstrip(" ") or "x"
        header = draw(st.sampled_from(["|", "|-", "|+", ">", ">-", ">+"]))
        comment = " # c" if draw(st.booleans()) else ""
        extra = [draw(st.sampled_from(["", "", "", " ", "  "])) for _ in lines[1:]]
        lines[1:] = [pad + line if line else "" for pad, line in zip(extra, lines[1:], strict=True)]
        body = "\n".join(deeper + line if line else "" for line in lines)
        return f" {header}{comment}\n{body}"
    if style == "single" and all(c.isprintable() for c in text):
        return " '" + text.replace("'", "''") + "'"  # quoted values stay on one line
    return " " + double_quoted(text, draw)


@st.composite
def tools_value(draw: st.DrawFn) -> str:
    item = st.sampled_from(["Read", "Grep", "Bash(git:*)", "Bash(git log:*)", "web_fetch", "1"])
    items = draw(st.lists(item, max_size=4))
    form = draw(st.sampled_from(["flow", "block", "indentless", "string"]))
    if form == "flow":
        quoted = [f"'{i}'" if " " in i or draw(st.booleans()) else i for i in items]
        return " [" + ", ".join(quoted) + "]"
    if form in ("block", "indentless"):
        pad = "  " if form == "block" else ""
        rendered = [f'"{i}"' if " " in i else i for i in items] or ["Read"]
        return "\n" + "\n".join(f"{pad}- {i}" for i in rendered)
    return " " + (" ".join(items) if items and " " not in "".join(items) else f"'{' '.join(items)}'")


@st.composite
def frontmatter_doc(draw: st.DrawFn) -> tuple[str | bytes, str]:
    """A SKILL.md in hango's subset, and the frontmatter text PyYAML should read."""
    entries = [("name", draw(scalar(texts=NAMES))), ("description", draw(scalar()))]
    if draw(st.booleans()):
        entries.append((draw(st.sampled_from(["allowed-tools", "allowed_tools"])), draw(tools_value())))
    if draw(st.booleans()):
        key = st.sampled_from(["short-description", "owner", "version", "note", "on"])
        keys = draw(st.lists(key, min_size=1, max_size=3, unique=True))
        entries.append(("metadata", "".join(f"\n  {k}:{draw(scalar('  '))}" for k in keys)))
    if draw(st.booleans()):
        entries.append(("license", draw(scalar())))
    entries = draw(st.permutations(entries))
    lines: list[str] = []
    for key, value in entries:
        if draw(st.integers(0, 4)) == 0:
            lines.append(draw(st.sampled_from(["# comment", "", "   # indented comment"])))
        lines.append(f"{key}:{value}")
    text = "\n".join(lines)
    newline = "\r\n" if draw(st.booleans()) else "\n"
    body = f"---{newline}{text.replace(chr(10), newline)}{newline}---{newline}# Body{newline}"
    if draw(st.booleans()):
        return body.encode(), text
    return body, text


@FUZZ
@given(frontmatter_doc())
def test_differential_against_pyyaml(case: tuple[str | bytes, str]) -> None:
    head, text = case
    data = yaml_load(text)
    result = outcome(head)
    event("accepted" if isinstance(result, Frontmatter) else "rejected")
    if acceptable(data):
        assert isinstance(result, Frontmatter), f"{result} for {data!r}"
        assert_same_as_yaml(head, result)
    else:
        assert isinstance(result, FrontmatterError), f"accepted {result} for {data!r}"


@st.composite
def noisy_doc(draw: st.DrawFn) -> str:
    """A generated frontmatter, then spiked: junk inserted, lines re-indented or cut."""
    lines = draw(frontmatter_doc())[1].split("\n")
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["insert", "insert", "append", "indent", "delete", "cut"]))
        if op == "insert":
            at = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:at] + draw(st.lists(YAMLISH, max_size=4).map("".join)) + lines[i][at:]
        elif op == "append":
            lines[i] += draw(st.lists(YAMLISH, max_size=6).map("".join))
        elif op == "indent":
            lines[i] = " " * draw(st.integers(1, 3)) + lines[i]
        elif op == "delete" and len(lines) > 1:
            del lines[i]
        elif op == "cut":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
    return "---\n" + "\n".join(lines) + "\n---\n"


@FUZZ
@given(noisy_doc())
def test_noisy_frontmatter_is_read_right_or_rejected(head: str) -> None:
    result = outcome(head)
    event("accepted" if isinstance(result, Frontmatter) else f"rejected: {result.reason[:30]}")
    if isinstance(result, Frontmatter):
        assert_same_as_yaml(head, result)


@FUZZ
@given(
    st.sampled_from(["'a b'", '"a\\"b"', "[a, 'b']", "|", ">-", "plain", "'it''s'"]),
    st.lists(YAMLISH, min_size=1, max_size=6).map("".join),
)
def test_text_after_a_value_is_read_as_yaml_does_or_rejected(value: str, suffix: str) -> None:
    head = f"---\nname: demo\ndescription: {value}{suffix}\n  more\n---\n"
    result = outcome(head)
    if isinstance(result, Frontmatter):
        assert_same_as_yaml(head, result)


WORDS = st.sampled_from(["Use", "this", "when:", "asked", "C#", "1.0", "yes", "é", "—", "#x"])


@FUZZ
@given(st.lists(WORDS, min_size=2, max_size=6), st.sampled_from("'\""), st.data())
def test_quoted_values_over_several_lines_are_refused_not_folded(
    words: list[str], quote: str, data: st.DataObject
) -> None:
    # YAML folds a quoted value over several lines; hango reads quoted values on one line only,
    # so such a value is refused with its reason, whatever PyYAML would make of it.
    at = data.draw(st.integers(1, len(words) - 1))
    value = quote + " ".join(words[:at]) + "\n  " + " ".join(words[at:]) + quote
    result = outcome(f"---\nname: demo\ndescription: {value}\n---\n")
    assert isinstance(result, FrontmatterError)
    assert "does not close on its line" in result.reason and result.line == 3
