"""Settings for the django-tasks-db peer: the database backend, one PostgreSQL database.

``DATABASE_URL`` (``postgres://user@host:port/name``) names the database. The
connection is kept open between tasks (``CONN_MAX_AGE``): ``db_worker`` calls
``close_old_connections()`` around each task, and Django's default of 0 would
open a new connection for every one; ``TASKS_DB_CONN_MAX_AGE=0`` measures that.
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit

_url = urlsplit(os.environ["DATABASE_URL"])

SECRET_KEY = "bench-not-secret"  # noqa: S105
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django_tasks_db"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "USER": unquote(_url.username or ""),
        "PASSWORD": unquote(_url.password or ""),
        "HOST": _url.hostname or "",
        "PORT": str(_url.port or ""),
        "CONN_MAX_AGE": int(os.environ.get("TASKS_DB_CONN_MAX_AGE", "600")),
    }
}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
