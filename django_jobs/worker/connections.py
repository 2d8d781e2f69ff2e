"""Database connections of long-lived worker threads."""

from __future__ import annotations

import time

from django.db import connections


def tidy_connections() -> None:
    """Between two jobs: drop broken connections, keep healthy ones open.

    A worker thread is not a request: with ``CONN_MAX_AGE = 0`` Django's
    request cycle closes the connection after every request, which here would
    mean a new connection for every job. Healthy connections are kept; a
    positive ``CONN_MAX_AGE`` is honoured; a connection a handler broke, or
    left outside autocommit, is closed and reopened on its next use.
    """
    for connection in connections.all(initialized_only=True):
        if connection.connection is None:
            continue
        if connection.get_autocommit() != connection.settings_dict["AUTOCOMMIT"]:
            connection.close()
            continue
        if connection.errors_occurred:
            if connection.is_usable():
                connection.errors_occurred = False
            else:
                connection.close()
                continue
        max_age = connection.settings_dict.get("CONN_MAX_AGE")
        if max_age and connection.close_at is not None and time.monotonic() >= connection.close_at:
            connection.close()
