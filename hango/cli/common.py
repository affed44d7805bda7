"""What every ``hango`` subcommand shares: the error a user can fix, stderr, the database."""

from __future__ import annotations

import sys

import psycopg

from hango.db import Database
from hango.settings import Settings


class CliError(Exception):
    """A failure the user can fix; printed as ``hango: error: ...``."""


def say(message: str) -> None:
    """A message for the person at the shell: stderr, so stdout stays a value."""
    print(message, file=sys.stderr)


def open_db(settings: Settings) -> Database:
    try:
        return Database(settings)
    except psycopg.OperationalError as exc:
        raise CliError(f"cannot reach the database: {exc}".strip()) from None
