"""The run's namespace with its two reads in one round trip each (a ``read_file`` among them).

:class:`OneTripBackend` is the plain :class:`~hango.fs.backend.PostgresBackend` of a run (the
same database, tenant, agent, settings and author, every write and listing its own), except
that ``read_many`` and ``heads`` send the backend's own query through
:func:`~hango.perf.trip.one_trip` instead of a four-wait transaction. Inside a caller's
transaction (``within``) they stay the plain ones. The bytes it reads are counted on the backend
it stands in for.
"""

from __future__ import annotations

from collections.abc import Sequence

from hango.fs import queries
from hango.fs.backend import FileData, PostgresBackend
from hango.perf.trip import one_trip


class OneTripBackend(PostgresBackend):
    """``origin``'s namespace, each read one round trip."""

    def __init__(self, origin: PostgresBackend) -> None:
        super().__init__(origin.db, origin.tenant_id, origin.agent_id, origin.settings,
                         origin.conn, author=origin.author)
        self.origin = origin

    def decoded(self, rows: Sequence[tuple[str, bytes, int, int]], *,
                lenient: bool = False) -> list[FileData]:
        return self.origin.decoded(rows, lenient=lenient)

    def read_many(self, paths: Sequence[str], limit: int) -> list[FileData]:
        if self.conn is not None:
            return super().read_many(paths, limit)
        query, params = queries.read_many_query(self.ns(), paths, limit)
        return self.decoded(one_trip(self.db, self.tenant_id, [(query, params)])[0])

    def heads(self, directories: Sequence[str], name: str, limit: int,
              max_per_dir: int | None = None, cut_after: Sequence[bytes] = ()) -> list[FileData]:
        if self.conn is not None:
            return super().heads(directories, name, limit, max_per_dir, cut_after)
        query, params = queries.heads_query(self.ns(), directories, name, limit, max_per_dir,
                                            cut_after)
        return self.decoded(one_trip(self.db, self.tenant_id, [(query, params)])[0],
                            lenient=True)
