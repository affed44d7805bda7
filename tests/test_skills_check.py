"""``hango skills check PATH...``: SKILL.md files on disk, read by hango's own parser and held to
the Agent Skills name rules, one line per file, exit 1 on any problem."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hango.agent.frontmatter import HEAD_BYTES
from hango.cli import main

HANGO = str(Path(sys.executable).with_name("hango"))
CORPUS = Path(__file__).resolve().parent / "data" / "skills-corpus" / "files"


def skill(root: Path, folder: str, frontmatter: str, name: str = "SKILL.md") -> Path:
    path = root / folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\n{frontmatter}\n---\n\n# Body\n", encoding="utf-8")
    return path


def check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], str]:
    code = main(["skills", "check", *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def test_every_problem_is_one_line_with_path_line_and_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    skill(tmp_path, "skills/good", "name: good\ndescription: Fine.")
    skill(tmp_path, "skills/template", "name: template-skill\ndescription: Fine.")
    skill(tmp_path, "skills/colon", "name: colon\ndescription: Use when: asked")
    skill(tmp_path, "skills/code_explorer", "name: code_explorer\ndescription: Fine.")
    skill(tmp_path, "skills/tools", "name: tools\ndescription: d\nallowed-tools: (read_file, ls)")
    skill(tmp_path, "skills/curly", "name: curly\ndescription: \u201cQuoted: the wrong way\u201d")
    skill(tmp_path, "skills/long", "name: long\ndescription: " + "x" * 1025)
    skill(tmp_path, "skills/no-name", "description: d")
    other = skill(tmp_path, "notes", "name: notes\ndescription: d", name="README.md")
    code, lines, err = check(capsys, "skills", str(other), "missing", "notes")
    assert code == 1
    assert lines == [
        "skills/code_explorer/SKILL.md:2: name 'code_explorer' breaks the Agent Skills naming rule "
        "(lowercase letters, digits and single inner hyphens) (hango loads it with a warning; the "
        "spec requires it)",
        "skills/colon/SKILL.md:3: ': ' inside an unquoted value; quote the value",
        "skills/curly/SKILL.md:3: curly (smart) quotes do not quote a value in YAML; use straight "
        "quotes \" or '",
        "ok: skills/good/SKILL.md",
        "skills/long/SKILL.md:3: description is 1025 characters; the limit is 1024",
        "skills/no-name/SKILL.md: missing required key 'name'",
        "skills/template/SKILL.md:2: name 'template-skill' does not match its folder 'template' "
        "(the Agent Skills spec requires them to be equal)",
        "skills/tools/SKILL.md:4: 'allowed-tools': '(read_file, ls)' is not a tool name (parentheses "
        "follow a tool name, as in Bash(git:*)); to list tools, separate them with spaces: "
        "allowed-tools: read_file ls",
        f"{other}: hango reads only SKILL.md files",
        "missing: no such file or directory",
        "notes: no SKILL.md file under this directory",
    ]
    assert err == "11 checked: 1 ok, 10 with problems\n"


def test_clean_files_exit_0_and_warnings_count_only_with_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = skill(tmp_path, "pdf-forms", "name: pdf-forms\ndescription: d\nlicense: MIT\nmodel: x")
    code, lines, err = check(capsys, str(path))
    assert (code, err) == (0, "1 checked: 1 ok, 0 with problems\n")
    assert lines == [f"ok: {path} (warning: line 5: key 'model' is not used by hango; ignored)"]
    code, lines, _ = check(capsys, "--strict", str(path))
    assert code == 1
    assert lines == [f"{path}: line 5: key 'model' is not used by hango; ignored (--strict)"]


def test_the_name_must_match_its_folder_after_nfkc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As skills-ref compares them: "ﬁle" (U+FB01) and "file" are the same name after NFKC.
    path = skill(tmp_path, "\ufb01le", "name: file\ndescription: d")
    assert check(capsys, str(path))[0] == 0
    assert check(capsys, str(skill(tmp_path, "caf\u00e9", "name: cafe\ndescription: d")))[0] == 1


def test_only_the_head_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "big" / "SKILL.md"
    path.parent.mkdir()
    path.write_bytes(b"---\nname: big\ndescription: d\n" + b"#\n" * HEAD_BYTES + b"---\n")
    code, lines, _ = check(capsys, str(path))
    assert code == 1
    assert lines == [f"{path}:1: frontmatter not closed within the first {HEAD_BYTES} bytes"]


def test_the_public_corpus(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, err = check(capsys, str(CORPUS))
    problems = [line.removeprefix(f"{CORPUS}/") for line in lines if not line.startswith("ok: ")]
    assert code == 1 and err == "92 checked: 88 ok, 4 with problems\n"
    assert [p.split(": ", 1)[0] for p in problems] == [
        "anthropics__skills/skills/claude-api/SKILL.md:3",  # 1,068 characters
        "anthropics__skills/template/SKILL.md:2",  # name 'template-skill' in folder 'template'
        "google-gemini__gemini-cli/tools/caretaker-agent/cloudrun/triage-worker/.gemini/skills/"
        "code_explorer/SKILL.md:2",
        "google-gemini__gemini-cli/tools/caretaker-agent/cloudrun/triage-worker/.gemini/skills/"
        "spec_generator/SKILL.md:2",
    ]


def test_the_command_from_a_folder_with_a_space(tmp_path: Path) -> None:
    root = tmp_path / "AI Workshop" / "skills"
    skill(root, "report", "name: report\ndescription: Summarise a report.")
    skill(root, "broken", "name: broken\ndescription: &a anchored")
    result = subprocess.run([HANGO, "skills", "check", "."], capture_output=True, text=True,
                            timeout=60, cwd=root, env=dict(os.environ))
    assert result.returncode == 1, result.stderr
    assert result.stdout == ("broken/SKILL.md:3: anchors ('&') are not supported\n"
                             "ok: report/SKILL.md\n")
    assert result.stderr == "2 checked: 1 ok, 1 with problems\n"
    usage = subprocess.run([HANGO, "skills", "check"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "PATH" in usage.stderr
