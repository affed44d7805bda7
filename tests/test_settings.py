"""Every ``HANGO_*`` variable: its default is the one the README documents, and a bad value
stops hango with an error that names the variable (never a silent fallback to the default)."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

from hango.settings import Settings, SettingsError, load_settings

README = Path(__file__).resolve().parents[1] / "README.md"
FIELDS = sorted(Settings.model_fields)


def _env(name: str) -> str:
    return "HANGO_" + name.upper()


def _documented() -> dict[str, str]:
    """``| `HANGO_X` | default | meaning |`` rows of the README's settings table."""
    rows = {}
    for line in README.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"`HANGO_[A-Z0-9_]+`", cells[0]):
            rows[cells[0].strip("`")] = cells[1]
    return rows


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in FIELDS:
        monkeypatch.delenv(_env(name), raising=False)


@pytest.mark.parametrize("name", FIELDS)
def test_every_variable_is_documented_with_its_default(name: str) -> None:
    documented = _documented()
    assert _env(name) in documented, f"{_env(name)} has no row in the README's settings table"
    default = Settings.model_fields[name].default
    cell = documented[_env(name)]
    if default is None:
        assert cell.startswith("unset"), f"{_env(name)}: README says {cell!r}, code says unset"
    elif isinstance(default, list):
        assert ",".join(default) in cell.replace("`", "")
    else:
        shown = getattr(default, "value", default)  # an enum shows its value
        if isinstance(shown, float) and shown.is_integer():
            shown = int(shown)
        assert str(shown) in cell.replace("`", "").replace(",", "").replace("_", ""), (
            f"{_env(name)}: README says {cell!r}, code says {shown!r}")


def test_every_row_of_the_readme_table_is_a_setting() -> None:
    """And the other way round: the table has no row for a variable hango does not read."""
    assert sorted(_documented()) == sorted(_env(name) for name in FIELDS)


@pytest.mark.parametrize("name", FIELDS)
def test_the_default_is_what_an_empty_environment_gives(name: str) -> None:
    assert getattr(load_settings(), name) == Settings.model_fields[name].default


def _bad_values(name: str) -> list[str]:
    field = Settings.model_fields[name]
    kinds = set(typing.get_args(field.annotation)) | {field.annotation}
    bad: list[str] = []
    if int in kinds:
        bad.append("twelve")
        for meta in field.metadata:
            if hasattr(meta, "ge"):
                bad.append(str(meta.ge - 1))
            if hasattr(meta, "le"):
                bad.append(str(meta.le + 1))
    if float in kinds:
        bad.append("fast")
    if bool in kinds:
        bad.append("perhaps")
    if any(typing.get_origin(k) is list for k in kinds):
        bad += ['["/unclosed', "relative/path"]
    if any(typing.get_origin(k) is typing.Literal for k in kinds):
        bad.append("no-such-choice")
    if any(getattr(m, "pattern", None) for m in field.metadata):
        bad.append("Not Valid!")
    if any(getattr(m, "min_length", None) for m in field.metadata):
        bad.append("")
    return bad


CASES = [(name, value) for name in FIELDS for value in _bad_values(name)]


def test_most_variables_have_a_bad_value_tried() -> None:
    untried = {n for n in FIELDS} - {n for n, _ in CASES}
    # any URL, folder or host name is accepted here and checked where it is used
    assert untried <= {"database_url", "data_dir", "host"}, untried


@pytest.mark.parametrize(("name", "value"), CASES)
def test_a_bad_value_names_its_variable(monkeypatch: pytest.MonkeyPatch, name: str,
                                        value: str) -> None:
    monkeypatch.setenv(_env(name), value)
    with pytest.raises(SettingsError, match=_env(name)):
        load_settings()


def test_lists_read_commas_and_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANGO_MEMORY_DEFAULT_SOURCES", " /memories/a.md , /memories/b.md ")
    assert load_settings().memory_default_sources == ["/memories/a.md", "/memories/b.md"]
    monkeypatch.setenv("HANGO_MEMORY_DEFAULT_SOURCES", '["/memories/c.md"]')
    assert load_settings().memory_default_sources == ["/memories/c.md"]
    monkeypatch.setenv("HANGO_SKILLS_DEFAULT_SOURCES", "/notes/")
    with pytest.raises(SettingsError, match=r"HANGO_SKILLS_DEFAULT_SOURCES.*/skills/"):
        load_settings()


def test_the_source_prefixes_are_the_reserved_prefixes() -> None:
    """settings imports nothing from hango, so it spells the prefixes itself: kept equal here."""
    from hango.fs.path import PREFIX_MEMORIES, PREFIX_SKILLS
    from hango.settings import SOURCE_PREFIXES

    assert SOURCE_PREFIXES == {"memory_default_sources": PREFIX_MEMORIES,
                               "skills_default_sources": PREFIX_SKILLS}


@pytest.mark.parametrize(("name", "value"), [
    ("HANGO_MEMORY_DEFAULT_SOURCES", "/memories/"),  # a directory, not a file
    ("HANGO_MEMORY_DEFAULT_SOURCES", "/memoriesx/a.md"),
    ("HANGO_MEMORY_DEFAULT_SOURCES", "memories/a.md"),
    ("HANGO_SKILLS_DEFAULT_SOURCES", "/skillsx/"),
    ("HANGO_SKILLS_DEFAULT_SOURCES", "skills/"),
])
def test_a_default_source_outside_its_prefix_names_its_variable(
        monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=name):
        load_settings()


def test_the_skills_directory_is_a_default_source_with_or_without_its_slash(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANGO_SKILLS_DEFAULT_SOURCES", "/skills,/skills/team")
    assert load_settings().skills_default_sources == ["/skills", "/skills/team"]


@pytest.mark.parametrize(("name", "value", "rule"), [
    ("HANGO_MEMORY_DEFAULT_SOURCES", "/memories/../notes/x.md", "'..' segment"),
    ("HANGO_MEMORY_DEFAULT_SOURCES", "/memories/a\tb.md", "control character"),
    ("HANGO_SKILLS_DEFAULT_SOURCES", "/skills//team/", "empty segment"),
])
def test_the_path_rules_name_the_variable_too(monkeypatch: pytest.MonkeyPatch, name: str,
                                               value: str, rule: str) -> None:
    """Under its prefix but breaking a rule of hango/fs/path.py: the agents module refuses it."""
    from hango.agents import check_default_sources

    monkeypatch.setenv(name, value)
    settings = load_settings()
    with pytest.raises(SettingsError, match=rf"{name}\[0\] .*{rule}"):
        check_default_sources(settings)
    from hango.api.app import create_app

    with pytest.raises(SettingsError, match=rf"{name}\[0\] .*{rule}"):
        create_app(settings=settings)  # the app refuses it before serving a run
    from hango.agent.stack import default_stack

    class _Agent:  # what default_stack reads of an agent run from a script or a notebook
        pass

    library_user = _Agent()
    library_user.settings = settings  # type: ignore[attr-defined]
    with pytest.raises(SettingsError, match=rf"{name}\[0\] .*{rule}"):
        default_stack(library_user)  # type: ignore[arg-type]  # a run refuses it before reading
    monkeypatch.delenv(name)
    assert check_default_sources(load_settings()) == load_settings()
