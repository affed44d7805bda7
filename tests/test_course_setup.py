"""A workshop laptop: the data folder from any working directory, a path with a space, the doctor.

These start real embedded servers in temporary folders (a few seconds each) in subprocesses, so
the session's own server and settings are untouched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
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


def test_doctor_reports_a_bad_setting_once_under_its_own_check_without_a_traceback(
        tmp_path: Path) -> None:
    env = {**os.environ, "HANGO_PORT": "notaport"}
    done = subprocess.run([sys.executable, "-m", "hango.doctor"], cwd=tmp_path, env=env, text=True,
                          capture_output=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    problems = [line for line in done.stdout.splitlines() if line.startswith("PROBLEM")]
    assert problems == [problems[0]] and problems[0].startswith("PROBLEM HANGO_* settings: HANGO_PORT")
    assert "skipped API port" in done.stdout and "ok      JupyterLab" in done.stdout


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


def _lab(runtime: Path) -> tuple[subprocess.Popen[str], dict[str, object]]:
    """``make lab`` as a learner runs it (the real jupyter server, on loopback, no browser), and
    the server's own record of itself (its runtime file: root, port, token)."""
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime)}
    lab = subprocess.Popen(  # a session of its own: make and the jupyter it starts end together
        ["make", "--no-print-directory", "lab",
         "LAB_ARGS=--no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port=0"],
        cwd=ROOT, env=env, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and lab.poll() is None:
        info = list(runtime.glob("jpserver-*.json"))
        if info:
            return lab, json.loads(info[0].read_text())
        time.sleep(0.2)
    os.killpg(lab.pid, signal.SIGKILL)
    raise AssertionError(f"make lab did not start (exit {lab.poll()}); run it by hand to see why")


def test_make_lab_roots_the_lab_at_the_project_so_every_notebook_link_opens(tmp_path: Path) -> None:
    import httpx
    from learner_text import links, notebooks

    lab, info = _lab(tmp_path)
    try:
        assert Path(str(info["root_dir"])) == ROOT
        opens = next(tmp_path.glob("jpserver-file-to-run-*-open.html")).read_text()
        assert "/lab/tree/notebooks/00-setup-and-tour.ipynb" in opens  # the lab opens on 00

        def exists(path: str) -> bool:
            response = httpx.get(f"{info['url']}api/contents/{path}",
                                 params={"content": 0}, headers={"Authorization": f"token {info['token']}"})
            return response.status_code == 200

        assert exists("docs/learning/11-memory-and-skills.md") and exists("docs/learning/glossary.md")
        assert exists("README.md")
        broken, checked = [], 0
        for notebook in notebooks():
            for where, target in links(notebook):
                if target.startswith(("http://", "https://", "#")):
                    continue
                path = (notebook.parent / target.split("#")[0]).resolve().relative_to(ROOT)
                checked += 1
                if not exists(path.as_posix()):
                    broken.append(f"{notebook.relative_to(ROOT)} {where}: {target}")
        assert checked > 20 and not broken, broken
    finally:
        os.killpg(lab.pid, signal.SIGTERM)  # jupyter is make's child: stop the whole group
        lab.wait(timeout=30)
