"""SQLite's journal: django-jobs puts the jobs database file in WAL mode itself.

Without WAL, a write waits until no connection reads: a handler or a view that
reads for a few seconds holds up every claim, outcome, lease renewal and
enqueue until the busy timeout makes them fail (a view's enqueue, with a 500).
WAL is a property of the file and stays with it, so ``migrate`` sets it (on
the database the jobs tables are migrated to) and ``runjobs`` makes sure of it
when it starts. A project that sets a journal mode in
``OPTIONS['init_command']`` keeps it; an in-memory database is left alone.
"""

from __future__ import annotations

import logging
from typing import TextIO

from django.db import DatabaseError, connections

from ..text import first_line
from . import get_driver

logger = logging.getLogger(__name__)


def use_wal_mode(using: str) -> str | None:
    """Put database ``using`` in WAL mode if it is a SQLite file not in it, whose journal
    mode the project did not choose; log one line. The line if it did, else None.

    A file the database cannot switch (another process holds it past the busy timeout)
    is logged as a warning and left as it is: the caller carries on.
    """
    driver = get_driver(using)
    name = connections[using].settings_dict["NAME"]
    try:
        switched = driver.put_in_wal_mode()
    except DatabaseError as exc:
        logger.warning(
            "could not put the SQLite file %s (database %r) in WAL mode (%s): its readers "
            "hold up every write until it is; see django_jobs.W003",
            name,
            using,
            first_line(exc),
            extra={"event": "sqlite_wal_failed", "database": using},
        )
        return None
    if not switched:
        return None
    line = f"put the SQLite file {name} (database {using!r}) in WAL mode; it stays with the file"
    logger.info(line, extra={"event": "sqlite_wal_enabled", "database": using})
    return line


def say_wal_mode_after_migrate(using: str, verbosity: int, stdout: TextIO) -> None:
    """``migrate``'s step (:mod:`.migrated`): WAL for the database the jobs tables were
    migrated on.

    Said on ``migrate``'s output too (at verbosity 1 or more) when no logging
    configuration prints django_jobs' records, which by default none does.
    """
    line = use_wal_mode(using)
    if line is not None and verbosity >= 1 and not logger.hasHandlers():
        stdout.write(f"  {line[0].upper()}{line[1:]}.\n")
