"""A learner's progress: the exercises they passed, kept where a notebook's fresh start cannot reach.

Every notebook's first cell drops and recreates its own tenant, so a pass cannot be kept in one:
it is kept per *learner*, in the table ``exercise_passes``, beside the tenants and not inside
them. The learner is ``HANGO_LEARNER``, or the login name. With a workshop's shared server
(``HANGO_SERVER_URL``), each check is recorded in the learner's seat there too (:mod:`hango.room`)
and :func:`progress` counts what the server holds. :func:`check` records each pass (the
first one counts; running a solution again changes nothing) and :func:`progress` shows, in any
notebook, what is passed and what comes next. What a pass verified is kept with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hango.exercises._core import EXERCISES, NOTEBOOKS, Course

if TYPE_CHECKING:
    from hango.db import Database

def passed(db: Database, learner: str) -> dict[str, str]:
    """``{exercise id: what its check verified}`` for every exercise ``learner`` passed."""
    with db.app() as conn:
        rows = conn.execute("SELECT exercise_id, verified FROM exercise_passes WHERE learner = %s",
                            [learner]).fetchall()
    return {str(exercise_id): str(verified) for exercise_id, verified in rows}


def forget(db: Database, learner: str) -> int:
    """Start over: delete every pass of ``learner``; return how many there were."""
    with db.app() as conn:
        cur = conn.execute("DELETE FROM exercise_passes WHERE learner = %s", [learner])
    return cur.rowcount


def progress(course: Course) -> None:
    """Print the course's exercises, notebook by notebook, passed (``✓``) or open (``·``), and
    the next one to do. The same in every notebook: progress is the learner's, not a tenant's."""
    done = passed(course.db, course.learner)
    ids = sorted(EXERCISES)
    where = ""
    shared = getattr(course, "shared", None)
    if shared is not None:  # a workshop's shared server: what it holds for the seat counts too
        try:
            on_server = shared.passed()
            where = f" (with seat {shared.tenant} on {shared.url}: {len(on_server)} passed there)"
            done = {**on_server, **done}
        except Exception as exc:
            where = f" (the shared server {shared.url} did not answer: {exc})"
    print(f"progress of learner {course.learner!r}: {sum(i in done for i in ids)} of {len(ids)} "
          "exercises passed" + where)
    width = max(len(title) for title in NOTEBOOKS.values()) + 3
    for number, title in NOTEBOOKS.items():
        marks = "  ".join(f"{'✓' if i in done else '·'} {i}" for i in ids if i[:2] == number)
        print(f"  {number} {title:<{width}}{marks}")
    following = next((i for i in ids if i not in done), None)
    if following is None:
        print("every exercise passed")
    else:
        print(f"next: {following} {EXERCISES[following].title} "
              f"(notebook {following[:2]}, {NOTEBOOKS[following[:2]]})")
