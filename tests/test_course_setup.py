"""A workshop laptop: the data folder from any working directory, a path with a space, the doctor.

These start real embedded servers in temporary folders (a few seconds each) in subprocesses, so
the session's own server and settings are untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hango.db import project_data_dir, resolve_data_dir
from hango.doctor import LAB_OVERRIDES, write_lab_settings
from hango.settings import load_settings

ROOT = Path(__file__).resolve().parents[1]


def test_a_relative_data_dir_is_taken_from_the_project_root_not_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_data_dir(load_settings(data_dir=Path("data/x"))) == ROOT / "data" / "x"
    monkeypatch.chdir(ROOT / "notebooks")  # where a notebook kernel runs
    assert resolve_data_dir(load_settings(data_dir=Path("data/x"))) == ROOT / "data" / "x"
    assert resolve_data_dir(load_settings(data_dir=tmp_path)) == tmp_path
    assert resolve_data_dir(load_settings()) == project_data_dir() == ROOT / ".hango"


def _run(code: str, data_dir: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HANGO_DATA_DIR": str(data_dir), "HANGO_DATABASE_NAME": "hango_test"}
    env.pop("HANGO_DATABASE_URL", None)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=180)


@pytest.mark.skipif(os.environ.get("HANGO_DATABASE_URL") is not None,
                    reason="the embedded server is not in use")
def test_the_embedded_server_starts_in_a_folder_whose_path_has_a_space_and_accents(
        tmp_path: Path) -> None:
    data = tmp_path / "AI Workshop" / "données hango"
    done = _run("from hango.db import Database\n"
                "db = Database()\n"
                "with db.app() as c: print(c.execute('SELECT 40 + 2').fetchone()[0])\n"
                "from hango.cli import main\n"
                "main(['db', 'stop'])\n", data, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[0] == "42"
    assert (data / "pgdata" / "PG_VERSION").exists()


@pytest.mark.skipif(os.environ.get("HANGO_DATABASE_URL") is not None,
                    reason="the embedded server is not in use")
def test_a_server_that_cannot_start_is_one_message_naming_the_folder_and_the_setting(
        tmp_path: Path) -> None:
    data = tmp_path / "broken"
    (data / "pgdata").mkdir(parents=True)
    (data / "pgdata" / "PG_VERSION").write_text("18\n")  # looks initialised, is not
    done = _run("from hango.db import Database\nDatabase()\n", data, tmp_path)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("hango.db_errors.DatabaseError: the embedded PostgreSQL did not start in ")
    assert "HANGO_DATA_DIR" in last and str(data / "pgdata") in last
    assert "CalledProcessError" not in done.stderr  # the cause is said once, not as a traceback chain


def test_lab_settings_turn_the_news_pop_up_off_and_keep_other_overrides(tmp_path: Path) -> None:
    target = tmp_path / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps({"@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"}}))
    assert write_lab_settings(tmp_path) == target
    settings = json.loads(target.read_text())
    assert settings["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    assert settings["@jupyterlab/apputils-extension:themes"] == {"theme": "JupyterLab Dark"}
    assert LAB_OVERRIDES.items() <= settings.items()


def test_doctor_names_an_unwritable_data_folder_and_exits_non_zero(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("in the way")  # root may write anywhere, but not into a file
    data = tmp_path / "a-file" / "data"
    done = _run("from hango.doctor import main\nraise SystemExit(main())\n", data, tmp_path)
    assert done.returncode >= 1
    assert "PROBLEM data folder" in done.stdout and "HANGO_DATA_DIR" in done.stdout


def test_a_kernel_is_told_when_another_notebook_took_its_tenant(db: object) -> None:
    from hango.api.client import ApiError
    from hango.models.simulated import SimulatedModel
    from hango.notebook import TenantTaken, start

    first = start("t-course-taken")
    try:
        first.owner.write("/notes/a.md", "mine")
        first.agent(SimulatedModel(policy=["ok"])).run("hi")  # nobody else yet: no complaint
        second = start("t-course-taken")  # a copy of the notebook, opened in another kernel
        try:
            with pytest.raises(TenantTaken, match="another notebook restarted tenant 't-course-taken'"):
                first.owner.read("/notes/a.md")  # its token is gone: a 401 explained
            with pytest.raises(TenantTaken, match="run this notebook again from its first cell"):
                first.agent(SimulatedModel(policy=["ok"]))
            with pytest.raises(ApiError) as missing:
                second.owner.read("/notes/a.md")  # the copy's own errors stay what they are
            assert missing.value.status == 404
        finally:
            second.close()
    finally:
        first.close()
