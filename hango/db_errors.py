"""What hango says when its database fails: the cause named, no internals, no password.

:func:`database_error` sorts a psycopg error into an outage (:class:`DatabaseError`, 503: the
server or a free connection is not there), a transaction aborted to let a concurrent one through
(:class:`Contention`, 409: send it again), a refusal (:class:`DatabaseRefused`, 500: the server
answered, but refused what hango sent, for a reason its operator fixes: a privilege, a pooler's
mode) or neither (a constraint, a raised exception: the code that sent the statement handles
it). :mod:`hango.db` raises its meaning wherever it hands out a connection (:func:`mapped`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import ClassVar
from urllib.parse import quote, urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import PoolTimeout

from hango.errors import HangoError

log = logging.getLogger("hango.db")


class DatabaseError(HangoError, RuntimeError):
    """The database is unreachable or refused a statement; the message says which."""

    status: ClassVar[int] = 503

    def detail(self) -> str:
        """The message's first line: PostgreSQL's DETAIL, HINT and CONTEXT lines (which can hold
        table contents) stay in the exception, out of an HTTP body."""
        return str(self).split("\n", 1)[0]

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "5"}


class Contention(DatabaseError):
    """PostgreSQL aborted a transaction to break a deadlock or a serialization failure with a
    concurrent one. Nothing of it was kept; the same request can simply be sent again."""

    status: ClassVar[int] = 409

    def __init__(self) -> None:
        super().__init__("the database aborted this request's transaction to resolve a conflict "
                         "with a concurrent one (a deadlock or a serialization failure); nothing "
                         "was written: send it again")

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


def aborted(exc: BaseException) -> bool:
    """Whether PostgreSQL rolled the transaction back to let a concurrent one through: SQLSTATE
    class 40 (deadlock detected, serialization failure), which psycopg raises as a plain
    OperationalError subclass, not as TransactionRollback."""
    return isinstance(exc, psycopg.Error) and (exc.sqlstate or "").startswith("40")


class DatabaseRefused(DatabaseError):
    """The database is there but refused what hango sent, for a reason its operator fixes (a
    privilege, a pooler's mode): a 500 naming the error class and what to check, never the
    server's own words (they may quote statements and names); the log has those."""

    status: ClassVar[int] = 500

    def headers(self) -> dict[str, str]:
        return {}


# Errors the server (or a pooler) answers with that are neither a bad input nor an outage:
# SQLSTATE -> what to check.
_POOLER = ("is a transaction-mode pooler in front of the server? Then set "
           "HANGO_DATABASE_POOLER=transaction (no prepared statements)")
_ROLE = ("check the role hango's transactions run as and what it is granted "
         "(`hango db status` shows both)")
_REFUSALS = {
    "26000": _POOLER,  # invalid_sql_statement_name: "prepared statement _pg3_0 does not exist"
    "42P05": _POOLER,  # duplicate_prepared_statement
    "08P01": _POOLER,  # protocol_violation: "bind message supplies 4 parameters, but ..."
    "42501": _ROLE,  # insufficient_privilege
    "0LP01": _ROLE,  # invalid_grant_operation
    "53300": "the server has no free connection slot: see the connection budget in "
             "`hango db status` (HANGO_DATABASE_POOL_SIZE, HANGO_DATABASE_LOOP_POOL_SIZE)",
}


def database_error(exc: psycopg.Error, pool: str = "") -> DatabaseError | None:
    """What ``exc`` means to hango's caller: an outage (503), a refusal (500, naming its class
    and what to check) or ``None``: an error of the statement itself (a constraint, a raised
    exception), which the code that sent it handles."""
    state = exc.sqlstate or ""
    if aborted(exc):
        return Contention()
    if isinstance(exc, PoolTimeout):
        return DatabaseError(f"database unavailable: no connection from the pool {pool} within "
                             f"its timeout (HANGO_DATABASE_POOL_TIMEOUT): the server is "
                             f"unreachable, or every connection of the pool is busy")
    if state == "08P01" and "query_wait_timeout" in str(exc):
        return DatabaseRefused("the database refused a statement: the pooler had no free server "
                               "connection for its query_wait_timeout: see the connection budget "
                               "in `hango db status` and the pooler's pool size")
    if state in _REFUSALS:
        name = type(exc).__name__
        if name in ("OperationalError", "ProgrammingError", "Error"):
            name = "SQLSTATE"
        log.warning("the database refused a statement (%s %s): %s", name, state,
                    exc.diag.message_primary or exc)
        check = _REFUSALS[state]
        if "row-level security" in str(exc):  # the second lock held where a WHERE did not
            check = "row-level security refused a row of another tenant than the transaction's"
        return DatabaseRefused(f"the database refused a statement: {name} ({state}): {check}")
    if isinstance(exc, psycopg.OperationalError):
        return DatabaseError(f"database unavailable: {exc}".strip())
    return None


@contextmanager
def mapped(pool: str = "") -> Iterator[None]:
    """Raise :func:`database_error`'s meaning of a psycopg error, if it has one."""
    try:
        yield
    except psycopg.Error as exc:
        mapped = database_error(exc, pool)
        if mapped is None:
            raise
        raise mapped from exc


def server_said(exc: psycopg.Error) -> str:
    """The server's (or pooler's) own words in ``exc``, without libpq's "connection to server
    at ... failed:" around them."""
    text = exc.diag.message_primary or str(exc)
    for mark in ("FATAL:", "ERROR:"):
        if mark in text:
            text = text.rsplit(mark, 1)[1]
    return " ".join(text.split())


def hide_password(conninfo: str) -> str:
    """``conninfo`` (a URL or ``key=value`` text) as a URL with its password, if any, hidden."""
    return url_of(conninfo_to_dict(conninfo))


def url_of(params: Mapping[str, object], password: bool = False) -> str:
    """A ``postgresql://`` URL from conninfo parameters (a socket directory goes in the query),
    its password shown as ``***`` unless ``password`` (``hango db url`` prints it whole)."""
    rest = {k: str(v) for k, v in params.items() if v not in (None, "")}
    user, secret = rest.pop("user", ""), rest.pop("password", "")
    host, port, dbname = rest.pop("host", ""), rest.pop("port", ""), rest.pop("dbname", "")
    shown = quote(secret, safe="") if password else "***"
    netloc = quote(user, safe="") + (":" + shown if secret else "")
    netloc += "@" if netloc else ""
    if host and not host.startswith("/") and "," not in host:
        netloc += host + (f":{port}" if port else "")
    else:
        rest = {**({"host": host} if host else {}), **({"port": port} if port else {}), **rest}
    query = urlencode(rest, safe="/")
    return f"postgresql://{netloc}/{quote(dbname, safe='')}" + (f"?{query}" if query else "")
