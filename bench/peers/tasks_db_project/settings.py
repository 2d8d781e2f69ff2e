"""Settings for the django-tasks-db peer: the database backend, one database.

``DATABASE_URL`` names the database: ``postgres://user@host:port/name``,
``mysql://user@host:port/name`` (MariaDB or MySQL, through Django's mysql
backend and mysqlclient, in four-byte ``utf8mb4``), or ``sqlite:///PATH``
(``sqlite:////tmp/tasks.sqlite3`` for an absolute path), a file opened as a
project would for its workers: ``transaction_mode``
``IMMEDIATE`` (a transaction takes the write lock up front) and a ``timeout``
of 20 s to wait for it. The connection is kept open between tasks
(``CONN_MAX_AGE``): ``db_worker`` calls ``close_old_connections()`` around each
task, and Django's default of 0 would open a new connection for every one;
``TASKS_DB_CONN_MAX_AGE=0`` measures that.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import unquote, urlsplit

SQLITE_OPTIONS = {"transaction_mode": "IMMEDIATE", "timeout": 20}
#: Four-byte UTF-8: Django's default, 'utf8', is the three-byte utf8mb3 on MariaDB.
MYSQL_OPTIONS = {"charset": "utf8mb4"}
SERVERS = {
    "postgres": "django.db.backends.postgresql",
    "postgresql": "django.db.backends.postgresql",
    "mysql": "django.db.backends.mysql",
}


def database(url: str, conn_max_age: int) -> dict[str, Any]:
    """The ``DATABASES`` entry for ``url``; ValueError if it is not PostgreSQL, MariaDB (or
    MySQL) or SQLite."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        name = unquote(parts.path[1:])  # sqlite:////tmp/x: /tmp/x; sqlite:///x: x
        if parts.netloc or not name:
            raise ValueError("a SQLite DATABASE_URL is sqlite:///PATH, a file")
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": name,
            "OPTIONS": dict(SQLITE_OPTIONS),
            "CONN_MAX_AGE": conn_max_age,
        }
    if parts.scheme in SERVERS:
        entry: dict[str, Any] = {
            "ENGINE": SERVERS[parts.scheme],
            "NAME": parts.path.lstrip("/"),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "CONN_MAX_AGE": conn_max_age,
        }
        if parts.scheme == "mysql":
            entry["OPTIONS"] = dict(MYSQL_OPTIONS)
        return entry
    # The scheme only: the URL may carry a password.
    raise ValueError(
        f"DATABASE_URL is postgres://..., mysql://... or sqlite:///PATH, not {parts.scheme}://..."
    )


SECRET_KEY = "bench-not-secret"  # noqa: S105
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django_tasks_db"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": database(
        os.environ["DATABASE_URL"], int(os.environ.get("TASKS_DB_CONN_MAX_AGE", "600"))
    )
}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
