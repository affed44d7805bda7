"""What a learner reads: plain words, no broken link, no misspelling.

The learner-facing files are the notebooks and their solutions, ``docs/learning/``, the README
and ``docs/workshop.md`` (``tests/learner_text.py``). Three checks, all offline:

- **vocabulary**: none of the words the project used while it was being built (the
  specification's "seed", its "phases" and "steps" of a plan, issue numbers, "HITL", an author's
  time budget): a learner was never told what they mean;
- **links**: every relative link points at a file that exists, and every ``#anchor`` at a heading
  of its target;
- **spelling**: every word of the prose is in the English dictionary of ``pyspellchecker`` or in
  the project's short word list, ``tests/data/learner-words.txt``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from learner_text import ROOT, Text, anchors, files, links, texts

VOCABULARY = {
    r"\bseeds?\b": "the specification hango was built from: say 'the specification'",
    r"\bphases?\b|\bphase-?\d+": "a step of the plan hango was built in: say what it is",
    r"\bHITL\b": "say 'a person approves' or 'human approval'",
    r"\bsteps? \d+ of\b|\bplan'?s? steps?\b|\blonger plan\b": "the plan hango was built in",
    r"\bissues? #?\d": "an issue number of this project's history",
    r"\btime budget\b|\bhours of implementation\b": "the author's budget, not the learner's time",
}


def _all_texts() -> list[Text]:
    return [text for path in files() for text in texts(path)]


def test_learner_facing_text_has_no_project_vocabulary() -> None:
    found = []
    for text in _all_texts():
        for pattern, why in VOCABULARY.items():
            for match in re.finditer(pattern, text.text, flags=re.IGNORECASE):
                line = text.text[:match.start()].count("\n") + 1
                found.append(f"{text.path.relative_to(ROOT)} {text.where} line {line}: "
                             f"{match.group()!r} ({why})")
    assert not found, "\n".join(found)


def test_every_relative_link_resolves_to_a_file_and_a_heading() -> None:
    broken, checked = [], 0
    for path in files():
        for where, target in links(path):
            if re.match(r"https?://", target):
                assert " " not in target and "." in target.split("/")[2], (path, target)
                continue
            checked += 1
            name, _, anchor = target.partition("#")
            goal = (path.parent / name).resolve() if name else path
            if not goal.exists():
                broken.append(f"{path.relative_to(ROOT)} {where}: {target} (no such file)")
            elif anchor and goal.suffix == ".md" and anchor not in anchors(goal):
                broken.append(f"{path.relative_to(ROOT)} {where}: {target} (no such heading)")
    assert checked > 40 and not broken, "\n".join(broken)


def _prose(text: Text) -> str:
    """The words of a text a learner reads as prose: no code, no paths, no URLs, no names."""
    if text.path.suffix == ".ipynb" and not text.markdown:
        if text.where.endswith("output"):
            return ""  # printed by the code: its words come from hango's own messages
        prose = "\n".join(re.findall(r"#\s?(.*)$", text.text, flags=re.MULTILINE))  # comments
    else:
        prose = text.text
    prose = re.sub(r"```.*?```", " ", prose, flags=re.DOTALL)
    prose = re.sub(r"`[^`\n]*`", " ", prose)
    prose = re.sub(r"https?://\S+", " ", prose)
    prose = re.sub(r"\]\([^)]*\)", "]", prose)
    # a path, an attribute, a setting or an identifier is code, written without backticks
    return re.sub(r"\S*(?:[/_\\=<>{}@$|~]|\w\.\w)\S*", " ", prose)


def _words(prose: str) -> list[str]:
    out = []
    for word in re.findall(r"[A-Za-z][A-Za-z'’-]*[A-Za-z]", prose):
        for part in word.replace("’", "'").split("-"):
            part = re.sub(r"'s$", "", part)
            if len(part) < 3 or part.isupper() or re.search(r"[a-z][A-Z]", part):
                continue  # an acronym, or a CamelCase name
            out.append(part.lower())
    return out


def test_learner_facing_prose_is_spelt_right() -> None:
    spellchecker = pytest.importorskip("spellchecker")
    listed = Path(ROOT / "tests" / "data" / "learner-words.txt").read_text(encoding="utf-8")
    words = [w for line in listed.splitlines() if not line.startswith("#") for w in line.split()]
    english = spellchecker.SpellChecker()
    english.word_frequency.load_words(words)
    unknown: dict[str, str] = {}
    for text in _all_texts():
        for word in _words(_prose(text)):
            if word not in english and word.replace("'", "") not in english:  # isn't, isnt
                unknown.setdefault(word, f"{text.path.relative_to(ROOT)} {text.where}")
    assert not unknown, "not in the dictionary nor in tests/data/learner-words.txt:\n" + "\n".join(
        f"{word}: {where}" for word, where in sorted(unknown.items()))


# --- numbers the course quotes, checked against the code ------------------------------------------

GLOSSARY = ROOT / "docs" / "learning" / "glossary.md"


def test_the_glossary_has_an_entry_for_every_word_a_learner_meets() -> None:
    text = GLOSSARY.read_text(encoding="utf-8")
    for word in ("ETag, If-Match", "miss reason", "interrupted, resume", "refresh rule",
                 "minimum cacheable length", "Token-weighted read ratio", "pace", "nbval",
                 "Langfuse", "deepagents", "goclaw", "baseline stack", "TTL", "check, exercise, progress",
                 "history, version, restore", "prompt of a run", "tenant defaults"):
        assert f"**{word}**" in text, word


def test_the_glossarys_numbers_are_the_codes() -> None:
    from hango.agents import COURSE_AGENT
    from hango.models.base import CacheDiagnostics
    from hango.models.simulated import (
        LOOKBACK,
        PRICES,
        STRICTEST_MIN_CACHEABLE,
        WRITE_1H,
        WRITE_5M,
        min_cacheable_tokens,
    )
    from hango.settings import load_settings

    text = " ".join(GLOSSARY.read_text(encoding="utf-8").split())
    settings, price = load_settings(), PRICES["hango-sim-1"]
    ttl = {"1h": "1 hour", "5m": "5 minutes"}
    for said in (
        f"(billed at {price.read:g}× the base price) or stored into it ({WRITE_5M:g}× for 5 "
        f"minutes, {WRITE_1H:g}× for 1 hour)",
        f"`HANGO_MEMORY_MAX_BYTES` ({settings.memory_max_bytes:,} bytes)",
        f"`HANGO_SKILLS_MAX` ({settings.skills_max})",
        f"{min_cacheable_tokens('hango-sim-1'):,} tokens for the course's `hango-sim-1`",
        f"the strictest value it knows, {STRICTEST_MIN_CACHEABLE:,}",
        f"more than {LOOKBACK} positions back",
        f"${price.input:g} per million input tokens, ${price.output:g} output",
        f"with {ttl[settings.cache_prefix_ttl]} by default (`HANGO_CACHE_PREFIX_TTL`)",
        f"The course's agent is `{COURSE_AGENT}`",
        f"`HANGO_HISTORY_MAX_VERSIONS` ({settings.history_max_versions})",
        f"`HANGO_RUN_PROMPT_MAX_BYTES` ({settings.run_prompt_max_bytes:,} bytes)",
    ):
        assert said in text, said
    entry = text[text.index("**miss reason**"):text.index("**namespace**")]
    doc = " ".join((CacheDiagnostics.__doc__ or "").split())
    reasons = set(re.findall(r"``(\w+)``", doc)) - {"miss_reason", "None"}
    assert set(re.findall(r"`([a-z_]+)`", entry)) - {"show_usage"} == reasons


CHAPTER = ROOT / "docs" / "learning" / "11-memory-and-skills.md"
GUIDE = ROOT / "docs" / "learning" / "README.md"


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    return text[start:text.index("\n## ", start + 1)]


def _minutes(said: str) -> int:
    hours = re.search(r"(\d+) h", said)
    return int(hours.group(1)) * 60 * bool(hours) + int(re.search(r"(\d+) min", said).group(1))


def test_the_time_tables_cover_every_notebook_and_add_up() -> None:
    from hango.exercises import NOTEBOOKS

    chapter = _section(CHAPTER.read_text(encoding="utf-8"), "## 13. Time")
    rows = dict(re.findall(r"^\| (\d\d) [^|]+\| (\d+) min \|$", chapter, flags=re.MULTILINE))
    guide = GUIDE.read_text(encoding="utf-8")
    listed = dict(re.findall(r"^\| (\d\d) \| `[^|]+\|.*\| (\d+) min \|$", guide, flags=re.MULTILINE))
    assert set(rows) == set(listed) == set(NOTEBOOKS) and rows == listed
    total = sum(int(m) for m in rows.values())
    (said,) = re.findall(r"^\| \*\*total\*\* \| \*\*(.+?)\*\*", chapter, flags=re.MULTILINE)
    assert _minutes(said) == total
    assert f"In all: {total // 60} h {total % 60} min of notebooks" in " ".join(guide.split())


def test_one_exercise_numbering_in_the_chapter_the_guide_and_the_notebooks() -> None:
    from hango.exercises import EXERCISES, NOTEBOOKS

    chapter = _section(CHAPTER.read_text(encoding="utf-8"), "## 12. Exercises")
    listed = re.findall(r"^- \*\*(\d\d\.\d) (.+?)\.\*\*", chapter, flags=re.MULTILINE)
    assert listed == [(i, " ".join(EXERCISES[i].title.split())) for i in sorted(EXERCISES)]
    guide = GUIDE.read_text(encoding="utf-8")
    for number in NOTEBOOKS:
        ids = sorted(i for i in EXERCISES if i[:2] == number)
        row = next(line for line in guide.splitlines() if line.startswith(f"| {number} | `"))
        said = re.search(r"exercises ([\d., –]+)", row)
        assert said is not None, row
        spans = said.group(1).strip()
        first, _, last = spans.partition("–")
        named = ([i for i in ids if first <= i <= last] if last else
                 [s.strip() for s in spans.split(",")])
        assert named == ids, (number, spans)
    for path in sorted((ROOT / "notebooks").glob("[0-9]*.ipynb")):
        prose = " ".join(t.text for t in texts(path) if t.markdown)
        ids = sorted(i for i in EXERCISES if i[:2] == path.name[:2])
        assert all(f"**{i} " in prose for i in ids), path.name  # each exercise under its number
        assert not re.search(r"\bexercises? \d\b", prose, flags=re.IGNORECASE), path.name


def test_the_chapters_minimum_length_table_is_the_simulators() -> None:
    from hango.models.simulated import MIN_CACHEABLE

    chapter = CHAPTER.read_text(encoding="utf-8")
    rows = re.findall(r"^\| ([\d,]+) \| (`.+) \|$", chapter, flags=re.MULTILINE)
    table = {int(tokens.replace(",", "")): re.findall(r"`([\w.-]+)`", ids) for tokens, ids in rows}
    expected: dict[int, list[str]] = {}
    for name, row in MIN_CACHEABLE.items():
        expected.setdefault(row.tokens, []).append(name)
    assert table == expected
