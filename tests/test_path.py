"""As the specification's `path_test.go`: reserved paths (`/memories/AGENTS.md`,
`/skills/x/SKILL.md`) writable only by owner/admin, the near-miss `/memorie/x` ordinary,
`/notes/../memories/AGENTS.md` rejected naming the rule, length limits inclusive, source
validation; a property test that every accepted path obeys every rule.

The path rules and the one write rule, as a table and as properties.

``/memories`` and ``/skills`` without a trailing slash are *files at the root* named like the
reserved directories. They are reserved too (``reserved_prefix`` checks ``path + "/" == prefix``):
otherwise a member could create a file ``/memories`` that shadows the directory in a listing.
"""

from __future__ import annotations

import os
import unicodedata

import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from hango.fs.path import (
    MAX_PATH_BYTES,
    MAX_SEGMENT_BYTES,
    PREFIX_MEMORIES,
    PREFIX_SKILLS,
    PathError,
    ReservedPathError,
    check_write,
    clean,
    clean_dir,
    is_reserved,
    reserved_prefix,
    validate_source,
)

EXAMPLES = int(os.environ.get("HANGO_FUZZ_EXAMPLES", "2000"))

# --- table -------------------------------------------------------------------------------------

RESERVED = [
    ("/memories/AGENTS.md", PREFIX_MEMORIES),
    ("/memories/team/notes.md", PREFIX_MEMORIES),
    ("/skills/x/SKILL.md", PREFIX_SKILLS),
    ("/skills/a/b/c.py", PREFIX_SKILLS),
    ("/memories", PREFIX_MEMORIES),  # a root file named like the directory: reserved
    ("/skills", PREFIX_SKILLS),
]

ORDINARY = [
    "/memorie/x",
    "/skillsx/y",
    "/memoriesx",
    "/notes/memories/AGENTS.md",  # the prefix is anchored at the root
    "/Memories/AGENTS.md",  # case matters: only the exact prefix is reserved
    "/skill/x/SKILL.md",
    "/notes/x",
    "/a",
    "/héllo/wörld.md",
    "/日本/ファイル.txt",
    "/emoji/😀.md",
    "/a b/c d.txt",
    "/.hidden",
    "/...",  # three dots is a name, not a traversal
    "/a..b",
]


@pytest.mark.parametrize(("path", "prefix"), RESERVED)
def test_reserved_paths(path: str, prefix: str) -> None:
    assert clean(path) == path
    assert is_reserved(path)
    assert reserved_prefix(path) == prefix
    for role in ("owner", "admin"):
        assert check_write(path, role) == path
    for role in ("member", None):
        with pytest.raises(ReservedPathError) as info:
            check_write(path, role)
        message = str(info.value)
        assert prefix in message and "owner or admin" in message
        assert ("the agent" if role is None else "a member") in message


@pytest.mark.parametrize("path", ORDINARY)
def test_ordinary_paths_anyone_writes(path: str) -> None:
    assert clean(path) == path
    assert not is_reserved(path)
    for role in ("owner", "admin", "member", None):
        assert check_write(path, role) == path


REJECTED = [
    ("/notes/../memories/AGENTS.md", "'..' segment"),
    ("/memories/./x", "'.' segment"),
    ("/..", "'..' segment"),
    ("/.", "'.' segment"),
    ("//memories/x", "empty segment"),
    ("/notes//x", "empty segment"),
    ("memories/x", "absolute"),
    ("", "absolute"),
    ("./memories/x", "absolute"),
    ("/notes\\..\\memories\\x", "backslash"),
    ("/a\\b", "backslash"),
    ("/a\x00b", "U+0000"),
    ("/a\nb", "U+000A"),
    ("/a\tb", "U+0009"),
    ("/a\x7fb", "U+007F"),
    ("/a\x85b", "U+0085"),  # C1 control
    ("/mem\u200bories/x", "U+200B"),  # zero-width space
    ("/\u200dx", "U+200D"),  # zero-width joiner
    ("/\ufeffx", "U+FEFF"),  # BOM
    ("/notes/\u202etxt.exe", "U+202E"),  # bidi override
    ("/notes/\u2066x", "U+2066"),  # bidi isolate
    ("/a\u2028b", "U+2028"),  # line separator
    ("/a\ue000b", "U+E000"),  # private use
    ("/a\U000e0001", "U+E0001"),  # language tag (format)
    ("/a\ud800b", "U+D800"),  # lone surrogate
    ("/notes/", "must not end with /"),
    ("/memories/", "must not end with /"),
    ("/", "must not end with /"),
    ("/" + "a" * (MAX_SEGMENT_BYTES + 1), f"longer than {MAX_SEGMENT_BYTES} bytes"),
    ("/" + "é" * 128, f"longer than {MAX_SEGMENT_BYTES} bytes"),  # 256 bytes in 128 characters
    ("/" + "/".join(["a" * 200] * 6), f"longer than {MAX_PATH_BYTES} bytes"),
]


@pytest.mark.parametrize(("path", "rule"), REJECTED)
def test_rejected_paths_name_the_rule(path: str, rule: str) -> None:
    with pytest.raises(PathError) as info:
        clean(path)
    assert rule in str(info.value)
    assert info.value.path == path
    # the write rule rejects them too, for every role: a bad path is never "just not reserved"
    for role in ("owner", "member", None):
        with pytest.raises(PathError):
            check_write(path, role)


@pytest.mark.parametrize("value", [None, 3, b"/x", ["/x"]])
def test_non_strings_are_rejected(value: object) -> None:
    with pytest.raises(PathError, match="must be a string"):
        clean(value)


def test_length_limits_are_inclusive() -> None:
    segment = "a" * MAX_SEGMENT_BYTES
    assert clean("/" + segment) == "/" + segment
    longest = "/" + "/".join(["a" * 200] * 5)
    longest += "/" + "b" * (MAX_PATH_BYTES - len(longest) - 1)
    assert len(longest) == MAX_PATH_BYTES
    assert clean(longest) == longest
    with pytest.raises(PathError, match=f"longer than {MAX_PATH_BYTES}"):
        clean(longest + "b")


@pytest.mark.parametrize(
    ("given", "expected"),
    [("/", "/"), ("/notes", "/notes/"), ("/notes/", "/notes/"), ("/skills/team", "/skills/team/")],
)
def test_clean_dir_adds_the_trailing_slash(given: str, expected: str) -> None:
    assert clean_dir(given) == expected


@pytest.mark.parametrize("bad", ["", "notes/", "//", "/a//", "/a/../", "/a/./", "/a\\b/"])
def test_clean_dir_rejects(bad: str) -> None:
    with pytest.raises(PathError):
        clean_dir(bad)


def test_sources() -> None:
    assert validate_source("/memories/AGENTS.md", PREFIX_MEMORIES) == "/memories/AGENTS.md"
    assert validate_source("/skills", PREFIX_SKILLS) == "/skills/"
    assert validate_source("/skills/team", PREFIX_SKILLS) == "/skills/team/"
    with pytest.raises(PathError, match="must be under /memories/"):
        validate_source("/notes/AGENTS.md", PREFIX_MEMORIES)
    with pytest.raises(PathError, match="must be under /skills/"):
        validate_source("/skillsx/", PREFIX_SKILLS)
    with pytest.raises(PathError, match=r"'\.\.' segment"):
        validate_source("/memories/../notes/x", PREFIX_MEMORIES)


# --- properties --------------------------------------------------------------------------------

# Pieces that sit near the rules: the reserved names and near-misses, dots, empties, slashes,
# backslashes, controls, invisible characters and long runs, plus any text at all.
PIECES = st.sampled_from([
    "memories", "skills", "memorie", "skillsx", "Memories", "SKILL.md", "AGENTS.md", "x",
    ".", "..", "...", "", "/", "\\", "\x00", "\n", "\u200b", "\u202e", "\ufeff", "é", "😀",
    "a" * 254, "é" * 127,
])
SEGMENT = st.one_of(PIECES, st.text(max_size=12), st.lists(PIECES, max_size=3).map("".join))
PATHS = st.one_of(
    st.lists(SEGMENT, max_size=6).map(lambda parts: "/" + "/".join(parts)),
    st.lists(SEGMENT, max_size=6).map("/".join),  # often relative
    st.text(max_size=40),
)
PROPERTY = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _reserved_by_prefix(path: str) -> bool:
    return any(path.startswith(p) or path + "/" == p for p in (PREFIX_MEMORIES, PREFIX_SKILLS))


@PROPERTY
@given(PATHS)
def test_accepted_paths_obey_every_rule(path: str) -> None:
    try:
        directory = clean_dir(path)
    except PathError:
        directory = None
    try:
        cleaned = clean(path)
    except PathError:
        # clean_dir accepts a superset: every file path is also a directory path
        return
    assert directory == path + "/"
    assert cleaned == path  # accepted paths are returned as given: nothing is resolved
    assert path.startswith("/") and not path.endswith("/")
    segments = path[1:].split("/")
    assert all(s not in ("", ".", "..") for s in segments)
    assert all(len(s.encode("utf-8")) <= MAX_SEGMENT_BYTES for s in segments)
    assert len(path.encode("utf-8")) <= MAX_PATH_BYTES
    assert "\\" not in path
    assert all(unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")
               for ch in path)
    assert clean(cleaned) == cleaned
    # is_reserved agrees with the prefix rule, and the write rule follows it for every role
    assert is_reserved(path) == _reserved_by_prefix(path)
    assert check_write(path, "owner") == path
    if is_reserved(path):
        with pytest.raises(ReservedPathError):
            check_write(path, "member")
    else:
        assert check_write(path, "member") == path

def _accepted(path: str) -> bool:
    try:
        clean(path)
    except PathError:
        return False
    return True


@pytest.mark.parametrize("kind", ["reserved", "near-miss", "deep", "rejected traversal"])
def test_the_strategy_reaches_every_kind_of_path(kind: str) -> None:
    """The properties above are only as good as what PATHS generates: prove it reaches each."""
    wanted = {
        "reserved": lambda p: _accepted(p) and is_reserved(p) and p.count("/") >= 2,
        "near-miss": lambda p: _accepted(p) and not is_reserved(p)
        and p.startswith(("/memorie", "/skills")),
        "deep": lambda p: _accepted(p) and p.count("/") >= 4,
        "rejected traversal": lambda p: not _accepted(p) and "/../" in p,
    }[kind]
    assert wanted(find(PATHS, wanted, settings=settings(max_examples=20_000, database=None)))


# --- the messages of the write rule and of a source -------------------------------------------


def test_an_agent_write_in_ask_mode_is_a_proposal_naming_path_and_prefix() -> None:
    from hango.fs.path import ApprovalRequired, check_write

    with pytest.raises(ApprovalRequired) as info:
        check_write("/memories/AGENTS.md", None, "ask")
    assert (info.value.path, info.value.prefix) == ("/memories/AGENTS.md", "/memories/")
    assert str(info.value) == ("'/memories/AGENTS.md' is under the reserved prefix /memories/: the "
                               "write becomes a proposal that an owner or admin approves or rejects")


def test_a_source_outside_its_prefix_is_named_in_the_error() -> None:
    from hango.fs.path import PathError, validate_source

    with pytest.raises(PathError) as info:
        validate_source("/notes/a.md", "/memories/")
    assert (info.value.path, info.value.rule) == ("/notes/a.md", "must be under /memories/")
    assert str(info.value) == "invalid path '/notes/a.md': must be under /memories/"



# --- the path rules' messages -----------------------------------------------------------------


@pytest.mark.parametrize(("path", "message"), [
    (5, "invalid path 5: must be a string"),
    ("notes/x", "invalid path 'notes/x': must be absolute (start with /)"),
    ("/a\\b", "invalid path '/a\\\\b': backslash is not allowed (use /)"),
    ("/a\u2029b", "invalid path '/a\\u2029b': invisible or unassigned character U+2029"),
    ("/a\u2028b", "invalid path '/a\\u2028b': invisible or unassigned character U+2028"),
    ("/notes/", "invalid path '/notes/': a file path must not end with /"),
    ("/notes//x", "invalid path '/notes//x': empty segment (//) is not allowed"),
])
def test_a_bad_file_path_names_the_rule_it_breaks(path: object, message: str) -> None:
    with pytest.raises(PathError) as info:
        clean(path)
    assert str(info.value) == message
    assert info.value.path == path


def test_the_root_spelled_with_an_empty_segment_is_refused_by_name() -> None:
    with pytest.raises(PathError) as info:
        clean_dir("//")
    assert str(info.value) == "invalid path '//': empty segment (//) is not allowed"
    assert (info.value.path, info.value.rule) == ("//", "empty segment (//) is not allowed")


@pytest.mark.parametrize(("role", "who"), [(None, "the agent"), ("member", "a member")])
def test_a_refused_reserved_write_says_where_and_who(role: str | None, who: str) -> None:
    with pytest.raises(ReservedPathError) as info:
        check_write("/memories/AGENTS.md", role)
    assert str(info.value) == (
        "'/memories/AGENTS.md' is under the reserved prefix /memories/: only an owner or admin "
        f"may write there, and only through the files API ({who} may not)")
    assert (info.value.path, info.value.prefix) == ("/memories/AGENTS.md", "/memories/")
