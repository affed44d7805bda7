"""``hango workshop provision``: every learner gets a working tenant, owner token and agent."""

from __future__ import annotations

import csv
import io
import uuid

import pytest

from hango.agent.base_prompt import BASE_PROMPT
from hango.agents import create_tenant, drop_tenant, load_agent, principal_for
from hango.cli import main
from hango.db import Database


def test_provision_prints_one_working_seat_per_learner(db: Database,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    prefix = "ws-" + uuid.uuid4().hex[:8]
    assert main(["workshop", "provision", "--learners", "3", "--prefix", prefix]) == 0
    captured = capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(captured.out)))
    try:
        assert [r["tenant"] for r in rows] == [f"{prefix}-01", f"{prefix}-02", f"{prefix}-03"]
        assert len({r["token"] for r in rows}) == 3
        for r in rows:
            principal = principal_for(db, r["token"])
            assert principal is not None and principal.tenant_id == r["tenant"]
            assert principal.role == r["role"] == "owner"
            config = load_agent(db, r["tenant"], r["agent"])
            assert config is not None and config.system_prompt == BASE_PROMPT  # long enough to cache
        assert {r["agent"] for r in rows} == {"assistant"}  # the README's and notebooks' name
        assert "3 learners: 3 tenants created; one new owner token each" in captured.err
        # again: the tenants and agents stay, new tokens are minted, the old ones still work,
        # and provision says so
        assert main(["workshop", "provision", "--learners", "3", "--prefix", prefix]) == 0
        captured = capsys.readouterr()
        again = list(csv.DictReader(io.StringIO(captured.out)))
        assert {r["token"] for r in again}.isdisjoint({r["token"] for r in rows})
        assert principal_for(db, rows[0]["token"]) is not None
        assert ("0 tenants created; 3 existed (their agents and files are kept as they were)"
                in captured.err and "3 earlier workshop token(s) still work" in captured.err)
        # a third time, revoking: only the newest tokens work
        assert main(["workshop", "provision", "--learners", "3", "--prefix", prefix,
                     "--revoke-earlier"]) == 0
        captured = capsys.readouterr()
        third = list(csv.DictReader(io.StringIO(captured.out)))
        assert "6 earlier workshop token(s) revoked" in captured.err
        assert all(principal_for(db, r["token"]) is None for r in rows + again)
        assert all(principal_for(db, r["token"]) is not None for r in third)
    finally:
        for r in rows:
            drop_tenant(db, r["tenant"])


def test_remove_deletes_the_workshops_tenants_only_when_told_yes(
        db: Database, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = "ws-" + uuid.uuid4().hex[:8]
    other = create_tenant(db, prefix + "-keep")  # not PREFIX-NN: never matched
    try:
        assert main(["workshop", "provision", "--learners", "2", "--prefix", prefix]) == 0
        rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
        assert main(["workshop", "remove", "--prefix", prefix]) == 1
        assert "add --yes" in capsys.readouterr().err
        assert principal_for(db, rows[0]["token"]) is not None
        assert main(["workshop", "remove", "--prefix", prefix, "--yes"]) == 0
        assert f"removed 2 tenant(s): {prefix}-01 ... {prefix}-02" in capsys.readouterr().out
        assert all(principal_for(db, r["token"]) is None for r in rows)
        assert _exists(db, other)
    finally:
        drop_tenant(db, other)


def _exists(db: Database, tenant: str) -> bool:
    with db.admin() as conn:
        return conn.execute("SELECT 1 FROM tenants WHERE tenant_id = %s", [tenant]).fetchone() is not None


@pytest.mark.parametrize(("args", "message"), [
    (["--learners", "0"], "learners must be between 1 and 1000, got 0"),
    (["--learners", "2", "--prefix", "Bad Prefix"], "tenant id 'Bad Prefix-01' must match"),
    (["--learners", "2", "--agent", "A1"], "agent id 'A1' must match"),
])
def test_bad_input_is_refused_naming_it_and_nothing_is_written(
        db: Database, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    assert main(["workshop", "provision", *args]) == 1
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""
