"""``hango files push|pull`` against a served API: roles, If-Match, nothing clobbered."""

from __future__ import annotations

from pathlib import Path

import pytest

from hango.agents import AgentConfig, create_token, save_agent
from hango.api.client import FilesClient
from hango.api.sync import pull, push
from hango.cli import main
from hango.db import Database

SKILL = "---\nname: {0}\ndescription: The {0} skill.\n---\n# {0}\n"


@pytest.fixture
def served(db: Database, tenant: str, api_url: str) -> tuple[str, str, str]:
    save_agent(db, tenant, "a1", AgentConfig())
    return api_url, create_token(db, tenant, "owner"), create_token(db, tenant, "member")


def _folder(root: Path) -> Path:
    for name in ("csv", "pdf"):
        (root / name).mkdir(parents=True)
        (root / name / "SKILL.md").write_text(SKILL.format(name), encoding="utf-8")
    (root / "pdf" / "reference.md").write_text("tables: camelot\n", encoding="utf-8")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: main\n")  # hidden: never pushed
    return root


def test_push_writes_new_files_then_reports_them_unchanged(served: tuple[str, str, str],
                                                           tmp_path: Path) -> None:
    url, owner, _ = served
    local = _folder(tmp_path / "skills")
    with FilesClient(url, owner, "a1") as client:
        first = push(client, local, "/skills/")
        assert first.ok and first.written == ["/skills/csv/SKILL.md", "/skills/pdf/SKILL.md",
                                              "/skills/pdf/reference.md"]
        assert client.read("/skills/pdf/reference.md") == "tables: camelot\n"
        again = push(client, local, "/skills")
        assert again.written == [] and len(again.unchanged) == 3


def test_a_member_cannot_push_skills_and_nothing_is_written(served: tuple[str, str, str],
                                                           tmp_path: Path) -> None:
    url, owner, member = served
    with FilesClient(url, member, "a1") as client:
        report = push(client, _folder(tmp_path / "skills"), "/skills/")
    assert not report.ok and len(report.refused) == 3
    assert all(": 403 " in line for line in report.refused)
    with FilesClient(url, owner, "a1") as client:
        assert client.glob("/skills/**") == []


def test_a_file_changed_meanwhile_is_a_conflict_not_overwritten(served: tuple[str, str, str],
                                                                tmp_path: Path) -> None:
    url, owner, _ = served
    with FilesClient(url, owner, "a1") as other:
        other.write("/skills/csv/SKILL.md", SKILL.format("old"))

        class Racing(FilesClient):
            def read_versioned(self, path: str) -> tuple[str, int]:
                seen = super().read_versioned(path)
                other.write(path, "someone else's edit")  # lands between our read and write
                return seen

        with Racing(url, owner, "a1") as client:
            report = push(client, _folder(tmp_path / "skills"), "/skills/")
        assert report.conflicts == ["/skills/csv/SKILL.md"] and not report.ok
        assert other.read("/skills/csv/SKILL.md") == "someone else's edit"


def test_pull_copies_the_agents_files_and_the_cli_says_what_it_did(
        served: tuple[str, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url, owner, _ = served
    local = _folder(tmp_path / "skills")
    (local / "bad.bin").write_bytes(b"\xff\xfe")
    code = main(["files", "push", str(local), "/skills/", "--agent", "a1", "--url", url,
                 "--token", owner])
    out = capsys.readouterr().out
    assert code == 1 and "refused" in out and "bad.bin: not UTF-8 text" in out
    assert "3 written, 0 unchanged, 0 conflict(s), 1 refused" in out
    target = tmp_path / "copy"
    with FilesClient(url, owner, "a1") as client:
        report = pull(client, "/skills/", target)
    assert report.ok and len(report.written) == 3
    assert (target / "pdf" / "SKILL.md").read_text(encoding="utf-8") == SKILL.format("pdf")
    assert main(["files", "pull", "/skills/", str(target), "--agent", "a1", "--url", url,
                 "--token", owner]) == 0
    assert "0 written, 3 unchanged" in capsys.readouterr().out


def test_pull_never_clobbers_a_local_edit_but_updates_what_it_wrote_itself(
        served: tuple[str, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url, owner, _ = served
    target = tmp_path / "copy"
    (target / "mine").mkdir(parents=True)
    (target / "mine" / "SKILL.md").write_text("my own draft\n", encoding="utf-8")  # never pulled
    with FilesClient(url, owner, "a1") as client:
        for name in ("csv", "pdf", "mine"):
            client.write(f"/skills/{name}/SKILL.md", SKILL.format(name))
        first = pull(client, "/skills/", target)
        assert first.conflicts == [str(target / "mine" / "SKILL.md")]  # it was there first
        (target / "csv" / "SKILL.md").write_text("edited here\n", encoding="utf-8")
        client.write("/skills/csv/SKILL.md", SKILL.format("csv, new"))
        client.write("/skills/pdf/SKILL.md", SKILL.format("pdf, new"))
        second = pull(client, "/skills/", target)
    assert (target / "csv" / "SKILL.md").read_text(encoding="utf-8") == "edited here\n"
    assert (target / "pdf" / "SKILL.md").read_text(encoding="utf-8") == SKILL.format("pdf, new")
    assert (target / "mine" / "SKILL.md").read_text(encoding="utf-8") == "my own draft\n"
    assert second.written == [str(target / "pdf" / "SKILL.md")] and len(second.conflicts) == 2
    assert main(["files", "pull", "/skills/", str(target), "--agent", "a1", "--url", url,
                 "--token", owner]) == 1
    assert "--force replaces it" in capsys.readouterr().err
    assert main(["files", "pull", "/skills/", str(target), "--agent", "a1", "--url", url,
                 "--token", owner, "--force"]) == 0
    assert (target / "csv" / "SKILL.md").read_text(encoding="utf-8") == SKILL.format("csv, new")


def test_no_token_and_no_server_are_one_clear_error(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HANGO_TOKEN", raising=False)
    assert main(["files", "pull", "/skills/", str(tmp_path), "--agent", "a1"]) == 1
    assert "a bearer token is needed" in capsys.readouterr().err
    assert main(["files", "pull", "/skills/", str(tmp_path), "--agent", "a1", "--token", "x",
                 "--url", "http://127.0.0.1:9"]) == 1
    assert "cannot reach the files API at http://127.0.0.1:9" in capsys.readouterr().err
