"""PostgreSQL's hot cursor: its statements prepared on the server, where it is safe.

Planning a hot-path statement costs more than running it, so the driver
prepares them (``DJANGO_JOBS["PREPARED_STATEMENTS"]``, on by default); psycopg
names them ``_pg3_0``, ``_pg3_1``... on each connection. Behind a pooler in
transaction mode that cannot keep them (PgBouncer before 1.21), a client's
transactions land on server connections that other clients prepared statements
on under the same names (42P05, ``already exists``; or, psycopg having
prepared its own under that name elsewhere, 08P01 when the numbers of
parameters differ), or that lack the ones it prepared (26000, ``does not
exist``).

Worse, a name can meet another client's statement with as many parameters of
the same types: the server runs that one, and nothing fails. So behind a
pooler nothing is prepared: the first hot statement on an alias asks whether
its session is the one its connection was given (:meth:`~PreparedStatements.pooled`, once
per alias and process), and if not, preparing stops there, with one warning
(``prepared_statements_off``) that names the setting.

Straight to the server a connection keeps its session, and the hot statements
are prepared. Should the server's prepared statements still not be psycopg's,
the first such failure stops the preparing on that alias for the process, with
the same warning, and the statement is sent again unprepared: on its own
(autocommit) at once, and in a transaction of the driver's own
(:meth:`~PreparedStatements.own_transaction`: a savepoint inside the caller's) by running that
transaction again. Only a failure inside the caller's transaction, which it
aborts, cannot be undone: behind a pooler, where they happen, nothing is
prepared.

A part of PostgreSQL's driver (``driver.prepared``): it keeps whether its alias
prepares, and is given the driver's :class:`~.statements.Statements`, not the
driver.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, NamedTuple, TypeVar

from django.db import DatabaseError

from .statements import Statements

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: psycopg's ``prepare_threshold`` on a connection whose hot-path statements are prepared:
#: the number of runs after which psycopg would prepare any other statement itself.
NEVER_BY_COUNT = 2**62

#: The attribute of a Django connection that keeps its :class:`HotCursor`.
HOT_CURSOR = "_django_jobs_hot_cursor"

#: The SQLSTATEs of a prepared statement the server has under another client's text
#: (42P05, duplicate_prepared_statement) or has not (26000, invalid_sql_statement_name).
LOST_PREPARED_STATEMENT = frozenset({"42P05", "26000"})
#: Another client's statement under the name psycopg gave its own, with another number of
#: parameters: protocol_violation, ``bind message supplies 9 parameters, but prepared
#: statement "_pg3_0" requires 10``.
OTHER_PREPARED_STATEMENT = "08P01"


def read_times_in_c(raw: Any) -> None:
    """Have the hot cursor ``raw`` read ``timestamptz`` values with psycopg's own loader.

    Django registers a loader of its own on each connection, a subclass of psycopg's
    pure-Python one (it sets the connection's time zone on each value): 6 µs a value,
    where psycopg's compiled one takes under 1, and a claim reads one per job (its
    ``run_at``). Both read the same instant; psycopg's carries the session's time zone,
    which Django sets to UTC under ``USE_TZ``."""
    import psycopg

    oid = psycopg.adapters.types["timestamptz"].oid
    for wire in (psycopg.pq.Format.TEXT, psycopg.pq.Format.BINARY):
        loader = psycopg.adapters.get_loader(oid, wire)
        if loader is not None:
            raw.adapters.register_loader(oid, loader)


class HotCursor(NamedTuple):
    """The hot-path cursor kept on one Django connection, and what it was made for."""

    raw_connection: Any
    logged: bool
    prepare: bool
    cursor: Any


def lost_prepared_statement(error: BaseException) -> bool:
    """Whether ``error`` (psycopg's, or Django's around it) says the server's prepared
    statements are not those psycopg prepared on this connection."""
    cause = error if hasattr(error, "sqlstate") else error.__cause__
    sqlstate = getattr(cause, "sqlstate", None)
    if sqlstate == OTHER_PREPARED_STATEMENT:
        return "prepared statement" in str(cause)
    return sqlstate in LOST_PREPARED_STATEMENT


class PreparedStatements:
    """The hot cursor of one PostgreSQL alias, its statements prepared while that holds."""

    def __init__(self, statements: Statements, prepare: bool) -> None:
        self.statements = statements
        # On until the server loses a prepared statement (:meth:`stop_preparing`).
        self.prepare = prepare
        self.stopping = threading.Lock()
        # Found on the first hot statement (:meth:`pooled`): none is prepared then.
        self.behind_pooler: bool | None = None

    @contextmanager
    def hot_cursor(self) -> Iterator[Any]:
        """A Django cursor whose statements are bound, and prepared, on the server.

        Wrapped like Django's own cursors, so query logging and
        ``execute_wrapper`` see its statements. One is kept per connection and
        used again (making and wrapping one costs as much CPU as the
        statement's own round trip): it is made anew when the connection was
        opened again, query logging was switched on or off, or preparing stopped.
        """
        connection = self.statements.connection
        connection.ensure_connection()
        kept: HotCursor | None = getattr(connection, HOT_CURSOR, None)
        if (
            kept is None
            or kept.raw_connection is not connection.connection
            or kept.logged != connection.queries_logged
            or kept.prepare != self.prepare
        ):
            kept = self.make_hot_cursor(connection)
            setattr(connection, HOT_CURSOR, kept)
        yield kept.cursor

    def make_hot_cursor(self, connection: Any) -> HotCursor:
        from django.db.backends.postgresql import base as backend

        raw: Any = backend.ServerBindingCursor(connection.connection)  # type: ignore[call-arg]
        # A logged connection (DEBUG, assertNumQueries) runs them unprepared, even those
        # prepared before: psycopg keeps no text of a prepared statement's run for the log.
        if self.prepare and not connection.queries_logged:
            raw.execute = partial(self.run, connection, raw, raw.execute)
            if connection.connection.prepare_threshold is None:
                # Django's default, under which psycopg prepares nothing, even when asked.
                # A threshold no statement reaches: only the hot path's are prepared.
                connection.connection.prepare_threshold = NEVER_BY_COUNT
        else:
            raw.execute = partial(raw.execute, prepare=False)
        read_times_in_c(raw)
        return HotCursor(
            connection.connection,
            connection.queries_logged,
            self.prepare,
            connection._prepare_cursor(raw),
        )

    def run(
        self,
        connection: Any,
        raw: Any,
        execute: Callable[..., Any],
        query: Any,
        params: Any = None,
    ) -> Any:
        """Run one statement of the hot cursor ``raw`` (``execute``: its psycopg method),
        prepared unless a pooler stands between this process and the server
        (:meth:`prepares_now`).

        If the server's prepared statements are not psycopg's all the same, preparing
        stops and the statement is sent again unprepared (autocommit); in a transaction
        of the driver's own, which the failure aborted, the error goes on to
        :meth:`own_transaction`, which runs it again.
        """
        if not self.prepares_now(connection):
            return execute(query, params, prepare=False)
        try:
            return execute(query, params, prepare=True)
        except Exception as error:  # psycopg's own: Django wraps it further out
            if not lost_prepared_statement(error):
                raise
            self.stop_preparing(error)
            if not connection.autocommit:
                raise
            if raw.pgresult is not None:
                # It ran: what failed is the DEALLOCATE of an old statement that psycopg
                # sends after one (past its ``prepared_max``). Not again.
                return raw
        return execute(query, params, prepare=False)

    def prepares_now(self, connection: Any) -> bool:
        """Whether the next hot statement on ``connection`` is prepared: only straight to
        the server (a pooler found stops the preparing, :meth:`pooled`)."""
        return self.prepare and not self.pooled(connection)

    def pooled(self, connection: Any) -> bool:
        """Whether the alias reaches the server through a pooler, as the first of its
        connections in this process to ask finds: the session its statements run in is not
        the one the connection was told of at its start (a pooler gives a key of its own,
        and hands the client's transactions to whichever server connection it has free).
        One round trip, once; a pooler found stops the preparing, saying so."""
        if self.behind_pooler is None:
            raw = connection.connection
            (pid,) = raw.execute("SELECT pg_backend_pid()", prepare=False).fetchone()
            self.behind_pooler = pid != raw.info.backend_pid
            if self.behind_pooler:
                self.stop_preparing("its connections reach the server through a pooler")
        return bool(self.behind_pooler)

    def stop_preparing(self, why: BaseException | str) -> None:
        """Prepare nothing more on the alias in this process, and say so, once."""
        with self.stopping:
            if not self.prepare:
                return
            self.prepare = False
        using = self.statements.using
        logger.warning(
            "database %r: %s, where prepared statements do not hold (a pooler in transaction"
            " mode hands them to other clients): django-jobs prepares none there from now on,"
            ' in this process. Set DJANGO_JOBS["PREPARED_STATEMENTS"] = False behind a pooler.',
            using,
            why
            if isinstance(why, str)
            else f"its server lost a prepared statement ({why})".strip(),
            extra={"event": "prepared_statements_off", "database": using},
        )

    def own_transaction(self, work: Callable[[], T]) -> T:
        """``work`` in a transaction of the driver's own (a savepoint inside the caller's),
        its hot statements prepared; run once more, unprepared, if the server's prepared
        statements were not psycopg's (the failure rolled it back)."""
        write_transaction = self.statements.write_transaction
        try:
            with write_transaction():
                return work()
        except DatabaseError as error:
            if not lost_prepared_statement(error):
                raise
            self.stop_preparing(error)
        with write_transaction():
            return work()
