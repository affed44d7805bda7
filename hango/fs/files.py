"""The filesystem's plain types: a file, a listing's entry and page, the namespace files live in,
the ``Backend`` protocol, and the two reads a run makes before it starts.

Nothing here runs SQL or imports the backend: the backend, its listings and its write path all
import this module, never the other way round.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from hango.errors import NotText

if TYPE_CHECKING:
    import psycopg

    from hango.db import Database
    from hango.settings import Settings

T = TypeVar("T")


@dataclass(frozen=True)
class FileData:
    path: str
    content: str
    version: int
    size: int  # the whole file's size in bytes, even when ``content`` is a truncated head

    @property
    def truncated(self) -> bool:
        return len(self.content.encode("utf-8")) < self.size


@dataclass(frozen=True)
class Entry:
    path: str
    is_dir: bool
    size: int = 0
    version: int = 0


class Page(list[T]):
    """One page of a listing: a plain list, plus ``next_cursor`` (``None`` on the last page).

    Pass ``next_cursor`` back as ``cursor`` to get the next page. A cursor is opaque: it holds
    the last path of this page (keyset pagination: the next page starts *after* it in the
    primary key, never at an offset), and the listing it belongs to.
    """

    def __init__(self, items: Iterable[T] = (), next_cursor: str | None = None) -> None:
        super().__init__(items)
        self.next_cursor = next_cursor


def decode_head(data: bytes, size: int | None = None) -> str:
    """Decode UTF-8 bytes that may end in the middle of a character (a byte-limited read).

    With ``size`` (the file's whole length), a cut character is dropped only if the read was cut
    (``len(data) < size``): a whole file ending mid-character is not UTF-8 text."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        cut = size is None or len(data) < size
        if cut and exc.start >= len(data) - 3 and exc.reason in ("unexpected end of data",):
            return data[: exc.start].decode("utf-8")
        raise NotText(f"not UTF-8 text at byte {exc.start}") from None


def decode_lenient(data: bytes, size: int | None = None) -> str:
    """:func:`decode_head`, but bytes that are not UTF-8 become lone surrogates instead of
    failing the whole batch: one non-text SKILL.md must not fail the skills scan (and a run), and
    the frontmatter reader refuses such a head by itself ("not valid UTF-8", with its line)."""
    try:
        return decode_head(data, size)
    except NotText:
        return data.decode("utf-8", "surrogateescape")


class Namespace:
    """Where one agent's files live: a database, a tenant, an agent, the settings that bound
    them, and the caller's transaction when there is one. Listings and the write path take it."""

    def __init__(self, db: Database, tenant_id: str, agent_id: str, settings: Settings,
                 conn: psycopg.Connection[Any] | None = None, *,
                 author: str | None = None) -> None:
        self.db = db
        self.tenant_id = tenant_id
        self.agent_id = agent_id
        self.settings = settings
        self.conn = conn  # the caller's transaction it works in (within), or None: its own
        self.author = author  # who writes through it ("owner:<token fingerprint>"), kept per version
        self.bytes_read = 0  # content bytes transferred from the database, for the caps' tests

    def ns(self) -> dict[str, Any]:
        """The namespace as query parameters: ``%(t)s`` the tenant, ``%(a)s`` the agent."""
        return {"t": self.tenant_id, "a": self.agent_id}

    @property
    def max_file_bytes(self) -> int:
        return self.settings.max_file_bytes

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """A transaction of this tenant, or a savepoint in the caller's (``conn``)."""
        if self.conn is None:
            with self.db.tenant(self.tenant_id) as conn:
                yield conn
        else:
            with self.conn.transaction():
                yield self.conn

    def decoded(self, rows: Sequence[tuple[str, bytes, int, int]], *,
                lenient: bool = False) -> list[FileData]:
        """``(path, content, version, size)`` rows as files, their bytes counted in ``bytes_read``."""
        self.bytes_read += sum(len(r[1]) for r in rows)
        decode = decode_lenient if lenient else decode_head
        return [FileData(path, decode(bytes(data), size), version, size)
                for path, data, version, size in rows]


@dataclass(frozen=True)
class ReadFiles:
    """Read ``paths``, in order, sharing ``limit`` bytes (:meth:`Backend.read_many`)."""

    paths: tuple[str, ...]
    limit: int


@dataclass(frozen=True)
class ReadHeads:
    """The first ``limit`` bytes of every ``name`` under ``directories``, at most ``max_per_dir``
    a directory, each ended after the first of ``cut_after`` it holds (:meth:`Backend.heads`)."""

    directories: tuple[str, ...]
    name: str
    limit: int
    max_per_dir: int | None = None
    cut_after: tuple[bytes, ...] = ()


Read = ReadFiles | ReadHeads


class Backend(Protocol):
    """What memory, skills, the tools and the files API need from a filesystem."""

    tenant_id: str
    agent_id: str

    def read(self, path: str, limit: int | None = None) -> FileData: ...
    def read_many(self, paths: Sequence[str], limit: int) -> list[FileData]: ...
    def heads(self, directories: Sequence[str], name: str, limit: int,
              max_per_dir: int | None = None, cut_after: Sequence[bytes] = ()) -> list[FileData]:
        ...
    def write(self, path: str, content: str, if_version: int | None = None) -> int: ...
    def edit(
        self, path: str, old: str, new: str, *, replace_all: bool = False,
        if_version: int | None = None,
    ) -> int: ...
    def delete(self, path: str, if_version: int | None = None) -> None: ...
    def ls(self, path: str = "/", limit: int | None = None,
           cursor: str | None = None) -> Page[Entry]: ...
    def glob(self, pattern: str, limit: int | None = None,
             cursor: str | None = None) -> Page[str]: ...


def read(backend: Backend, declared: Read) -> list[FileData]:
    """Run one declared read against ``backend``: one query."""
    if isinstance(declared, ReadFiles):
        return backend.read_many(declared.paths, declared.limit)
    return backend.heads(declared.directories, declared.name, declared.limit,
                         max_per_dir=declared.max_per_dir, cut_after=declared.cut_after)
