"""Checks for notebook 07: subagents and tenants."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hango.exercises._core import NotYet, _run, _tool_results, exercise
from hango.fs.backend import FileNotFound

if TYPE_CHECKING:
    from hango.agent.runtime import RunResult
    from hango.notebook import Course


# --- 07 subagents and tenants --------------------------------------------------------------------


@exercise("07.1", "Make a subagent with its own memory",
          answer="result=lead's RunResult, with task calls on researcher and writer",
          hint="save a 'writer' agent with its own memory, add it to lead's subagents, script lead to "
               "call task on both")
def _07_1(course: Course, result: RunResult | None = None) -> str:
    run = _run(result)
    config = course.owner.get_agent()
    if "writer" not in config.subagents:
        raise NotYet("writer is not among lead's subagents")
    tasks = [a.get("agent") for n, a, _, err in _tool_results(run) if n == "task" and not err]
    if not {"writer", "researcher"} <= set(tasks):
        raise NotYet(f"lead called task on {tasks}; it should call both")
    for child in ("writer", "researcher"):
        try:
            memory = course.backend(child).read("/memories/AGENTS.md").content
        except FileNotFound:
            raise NotYet(f"{child} has no /memories/AGENTS.md") from None
        if any(memory in b.text for r in run.requests for b in r.system):
            raise NotYet(f"{child}'s memory is in one of lead's requests")
    return "lead delegated to both; neither subagent's memory is in any of lead's requests"


@exercise("07.2", "Delegate to an agent that is not a subagent",
          answer="result=lead's RunResult, with a task call on 'stranger'",
          hint="task with {'agent': 'stranger', 'description': ...}")
def _07_2(course: Course, result: RunResult | None = None) -> str:
    run = _run(result)
    refused = [c for n, a, c, err in _tool_results(run) if n == "task" and err
               and a.get("agent") == "stranger"]
    if not refused:
        raise NotYet("no refused task call for 'stranger'")
    if run.stop_reason != "final":
        raise NotYet("the run did not finish")
    return f"the model got a tool error and the run went on: {refused[0]!r}"


@exercise("07.3", "Count another tenant's files with SQL",
          answer="sql=one SELECT (a string) whose first column counts tenant A's files; tenant_b=the id "
                 "of tenant B, which must exist",
          hint="with course.db.tenant(B) as conn: conn.execute(YOUR_SQL) — try a join, a subquery, "
               "EXISTS; RLS filters rows before your query sees them")
def _07_3(course: Course, sql: str | None = None, tenant_b: str = "nb-07-b") -> str:
    if not isinstance(sql, str) or "agent_files" not in sql:
        raise NotYet("pass your counting query as sql='SELECT ... agent_files ...'")
    if tenant_b == course.tenant:
        raise NotYet("tenant_b is tenant A itself: pass the id of the second tenant")
    with course.db.admin(tenant_b) as conn:  # RLS hides the tenants table: ask as its admin
        exists = conn.execute("SELECT 1 FROM tenants WHERE tenant_id = %s", [tenant_b]).fetchone()
    if exists is None:
        raise NotYet(f"there is no tenant {tenant_b!r}: create it first (create_tenant). A tenant "
                     "that does not exist counts 0 rows whatever RLS does, so it proves nothing")
    counts = {}
    for tenant in (course.tenant, tenant_b):
        with course.db.tenant(tenant) as conn, conn.transaction(force_rollback=True):
            row = conn.execute(sql.replace("%", "%%")).fetchone()  # rolled back: changes nothing
        value = None if row is None else row[0]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise NotYet(f"your query's first column is {value!r}: make it count rows, "
                         "SELECT count(*) ...")
        counts[tenant] = int(value or 0)
    if counts[course.tenant] == 0:
        raise NotYet("your query counts nothing even in tenant A: it must count A's files")
    if counts[tenant_b] != 0:
        raise NotYet(f"in tenant B your query counts {counts[tenant_b]} rows: if they are B's own "
                     "files, aim it at A's (a path or an agent only A has); if they are A's, that "
                     "would be a real leak: please report it")
    return (f"tenant A counts {counts[course.tenant]}, tenant B ({tenant_b}, which exists) counts 0 "
            "with the same query")
