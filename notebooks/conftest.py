"""nbval runs each notebook as a learner of its own, who has passed nothing yet.

A notebook's ``progress(course)`` cell shows the exercises its learner passed, which would
otherwise depend on what ran before (the solutions pass every check). So each notebook's kernel
starts with ``HANGO_LEARNER`` set to a new name, and that learner's passes are deleted at the
end of the session. The learner's name in the output is masked by ``sanitize.cfg``.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

LEARNERS: list[str] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    notebook = item.parent
    if notebook is not None and hasattr(notebook, "kernel") and notebook.kernel is None:
        # the notebook's kernel starts right after this hook, with this environment
        LEARNERS.append(f"nbval-{uuid.uuid4().hex[:12]}")
        os.environ["HANGO_LEARNER"] = LEARNERS[-1]


def pytest_sessionfinish(session: Any) -> None:
    if not LEARNERS:
        return
    from hango.db import Database
    from hango.exercises.progress import forget
    from hango.settings import load_settings

    db = Database(load_settings())
    try:
        for learner in LEARNERS:
            forget(db, learner)
    finally:
        db.close()
