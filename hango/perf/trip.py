"""One round trip: the app role, the tenant and a few statements, as one transaction.

``db.tenant()`` costs four waits for the server (BEGIN, the role and tenant, the statement,
COMMIT). :func:`one_trip` sends the role and the tenant (``set_config(..., true)``) and every
statement in pipeline mode on an autocommit connection, with ONE Sync: PostgreSQL runs what lies
between two Syncs as one implicit transaction, so the role and the tenant hold for every
statement (row-level security sees the tenant), one failure rolls all of it back, and a
transaction-mode pooler keeps the server connection until the Sync. Results are read only after
the Sync: a fetch inside the pipeline would be a wait of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, LiteralString

from psycopg import sql

from hango.db import BEGIN_APP, Database

# With prepared statements (psycopg prepares a statement on its fifth use), a generic plan too:
# re-planning them each time cost more than the gated run itself (0.2 of 0.27 ms). Behind a
# transaction-mode pooler they are off (db.py).
BEGIN_GENERIC: LiteralString = (
    BEGIN_APP + ", set_config('plan_cache_mode', 'force_generic_plan', true)")

Statement = tuple[LiteralString | sql.Composed, Mapping[str, Any]]


def one_trip(db: Database, tenant_id: str,
             statements: Sequence[Statement]) -> list[list[tuple[Any, ...]]]:
    """Run ``statements`` as the app role in ``tenant_id``, in one transaction and one round
    trip; the rows of each (none for a statement that returns none), in order."""
    # autocommit (statement()), so that psycopg adds no BEGIN or COMMIT of its own (each would
    # sync the pipeline)
    with db.statement() as conn:
        with conn.pipeline():
            conn.execute(BEGIN_GENERIC if db.prepared else BEGIN_APP, [tenant_id])
            cursors = [conn.execute(query, params, binary=True) for query, params in statements]
        return [cur.fetchall() if cur.description is not None else [] for cur in cursors]
