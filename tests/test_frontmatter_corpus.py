"""92 real `SKILL.md` files read exactly as PyYAML reads them, or rejected for one of hango's rules
(today: 91 identical, 1 rejected for a 1,068-character description).

Conformance: hango reads the public SKILL.md corpus as PyYAML does, or rejects it.

``tests/data/skills-corpus/expected.json`` (a copy of the course's research corpus)
records what PyYAML (``yaml.safe_load``) reads from each of 92 real frontmatters.
For every file hango must either read the same
name, description, tools, metadata and keys, or reject the file for one of hango's
own rules, and only when the recorded values really break that rule. A different
value is a failure. Run with ``-s`` to see the summary.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from hango.agent.frontmatter import (
    DESCRIPTION_MAX,
    NAME_MAX,
    Frontmatter,
    FrontmatterError,
    parse,
    split_tools,
)

# The corpus is vendored in tests/data so the test runs in every clone.
CORPUS = Path(__file__).resolve().parent / "data" / "skills-corpus"


def load_expected() -> list[dict[str, Any]]:
    path = CORPUS / "expected.json"
    if not path.is_file():
        pytest.fail(f"the skills corpus is missing: {path}")
    entries: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    return entries


EXPECTED = load_expected()


def hango_rule_broken(entry: dict[str, Any]) -> str | None:
    """The hango rule the recorded values break, as a reason fragment, or None."""
    name, description = entry["name"], entry["description"]
    if not isinstance(name, str) or not isinstance(description, str):
        return "not a string"
    if not 1 <= len(name) <= NAME_MAX:
        return f"name is {len(name)} characters"
    if len(description) > DESCRIPTION_MAX:
        return f"description is {len(description)} characters; the limit is {DESCRIPTION_MAX}"
    return None


def read(entry: dict[str, Any]) -> Frontmatter | FrontmatterError:
    try:
        return parse((CORPUS / "files" / entry["file"]).read_bytes())
    except FrontmatterError as error:
        return error


def expected_tools(value: Any) -> tuple[str, ...] | None:
    return None if value is None else tuple(value)


@pytest.mark.parametrize("entry", EXPECTED, ids=[e["file"] for e in EXPECTED])
def test_corpus_file(entry: dict[str, Any]) -> None:
    assert entry["yaml_ok"], "the corpus lists only files PyYAML can read"
    result = read(entry)
    rule = hango_rule_broken(entry)
    if rule is not None:
        assert isinstance(result, FrontmatterError), f"should be rejected: {rule}"
        assert rule in result.reason
        assert result.line is not None
        return
    assert isinstance(result, Frontmatter), f"rejected: {result}"
    assert result.name == entry["name"]
    assert result.description == entry["description"]
    assert result.allowed_tools == expected_tools(entry["allowed_tools"])
    metadata = None if result.metadata is None else dict(result.metadata)
    assert metadata == entry["metadata"]
    assert sorted(result.keys) == entry["keys"]


def frontmatter_text(data: bytes) -> str:
    """The lines between the markers, joined without a final newline (hango's reading)."""
    lines = data.decode("utf-8").removeprefix("\ufeff").split("\n")
    lines = [line.removesuffix("\r") for line in lines]
    close = lines.index("---", 1)
    return "\n".join(lines[1:close])


@pytest.mark.parametrize("entry", EXPECTED, ids=[e["file"] for e in EXPECTED])
def test_expected_json_is_what_pyyaml_reads(entry: dict[str, Any]) -> None:
    # Guards the oracle itself: a stale expected.json would make the test above lie.
    data = yaml.safe_load(frontmatter_text((CORPUS / "files" / entry["file"]).read_bytes()))
    assert sorted(data) == entry["keys"]
    assert data["name"] == entry["name"]
    assert data["description"] == entry["description"]
    assert data.get("metadata") == entry["metadata"]
    tools = data.get("allowed-tools", data.get("allowed_tools"))
    if isinstance(tools, str):
        tools = list(split_tools(tools))
    assert tools == entry["allowed_tools"]


def test_corpus_summary() -> None:
    """Count identical reads and rejections by reason; print them for the report."""
    outcomes: Counter[str] = Counter()
    warnings: Counter[str] = Counter()
    for entry in EXPECTED:
        result = read(entry)
        if isinstance(result, FrontmatterError):
            outcomes[f"rejected: {result.reason}"] += 1
            continue
        outcomes["read identically"] += 1
        for warning in result.warnings:
            message = warning.split(": ", 1)[1]  # drop "line N: "
            if message.startswith("name "):
                message = "name breaks the Agent Skills naming rule (" + result.name + ")"
            warnings[message] += 1
    print(f"\nSKILL.md corpus, {len(EXPECTED)} files:")
    for outcome, count in outcomes.most_common():
        print(f"  {count:3d}  {outcome}")
    print("  warnings on accepted files:")
    for warning, count in warnings.most_common():
        print(f"  {count:3d}  {warning}")
    broken = sum(hango_rule_broken(entry) is not None for entry in EXPECTED)
    assert outcomes["read identically"] == len(EXPECTED) - broken
    assert sum(outcomes.values()) == len(EXPECTED) == 92
