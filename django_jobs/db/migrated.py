"""What ``migrate`` of django_jobs does once the tables are there.

``migrate`` runs the system checks before it migrates, when the jobs tables may not
exist yet: what only the tables can tell (on MariaDB/MySQL, a table made in another
storage engine than InnoDB, ``django_jobs.E042``) is said here, on ``migrate``'s
output, rather than first when ``runjobs`` starts. A SQLite file is put in WAL mode
(:mod:`.journal`).
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from django.core.exceptions import ImproperlyConfigured
from django.db import router

from ..models import Job
from . import driver_class, get_driver
from .journal import say_wal_mode_after_migrate


def after_migrate(sender: Any, using: str = "default", verbosity: int = 1, **kwargs: Any) -> None:
    """``post_migrate`` of django_jobs, on the database its tables are migrated on."""
    if not router.allow_migrate_model(using, Job):
        return
    try:
        driver_class(using)
    except ImproperlyConfigured:
        return  # a database django-jobs does not run on: nothing of ours is there
    stdout = kwargs.get("stdout") or sys.stdout
    say_wal_mode_after_migrate(using, verbosity, stdout)
    say_table_messages(using, stdout)


def say_table_messages(using: str, stdout: TextIO) -> None:
    """What the database checks say of the tables ``migrate`` has just made, on its output
    whatever its verbosity, as ``migrate`` prints the checks' own."""
    found = [message for message in get_driver(using).table_messages() if not message.is_silenced()]
    for message in found:
        stdout.write(f"{message}\n")
