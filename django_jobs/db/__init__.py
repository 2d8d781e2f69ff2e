"""The database seam: every hot-path statement, one module per database."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.db import connections
from django.dispatch import receiver

from .base import DatabaseBusy, Driver
from .records import ROW_ERRORS, ClaimedJob, ClaimRequest

__all__ = [
    "ROW_ERRORS",
    "ClaimRequest",
    "ClaimedJob",
    "DatabaseBusy",
    "Driver",
    "driver_class",
    "get_driver",
]


def driver_class(using: str = "default") -> type[Driver]:
    """The driver class for the database behind ``using``: the one place that reads the
    vendor. Its class attributes say what the database can do. Found once per engine: it
    is asked on every deadline, and reading a connection's vendor goes through Django's
    per-thread connections."""
    configured = connections.settings.get(using)
    if configured is None:
        return _class_of(connections[using].vendor, using)  # Django says there is no such alias
    engine = configured["ENGINE"]
    found = _classes.get(engine)
    if found is None:
        found = _classes[engine] = _class_of(connections[using].vendor, using)
    return found


#: The driver class of each database engine (its ``ENGINE`` setting) asked for.
_classes: dict[str, type[Driver]] = {}


def _class_of(vendor: str, using: str) -> type[Driver]:
    if vendor == "postgresql":
        from .postgresql import PostgresDriver

        return PostgresDriver
    if vendor == "sqlite":
        from .sqlite import SQLiteDriver

        return SQLiteDriver
    if vendor == "mysql":
        from .mysql import MySQLDriver

        return MySQLDriver
    raise ImproperlyConfigured(
        f"django-jobs runs on PostgreSQL, SQLite and MariaDB or MySQL; the database {using!r} "
        f"is {vendor}"
    )


#: One driver per database alias: a driver keeps its statements' texts and quoted names,
#: so ``schedule_job()`` builds none of them again. Dropped when the settings change.
_drivers: dict[str, Driver] = {}


def get_driver(using: str = "default") -> Driver:
    """The driver for the database behind ``using`` (one per alias, shared by threads:
    a driver holds no state but what it has built once, and its flow control's note of the
    rate window's starts counted ahead for this process, :mod:`.limits`)."""
    driver = _drivers.get(using)
    if driver is None:
        driver = _drivers[using] = driver_class(using)(using)
    return driver


@receiver(setting_changed)
def _forget_drivers(*, setting: str, **kwargs: Any) -> None:
    """A driver reads ``DJANGO_JOBS`` (``LISTEN``, ...) and the database when it is made."""
    if setting in ("DJANGO_JOBS", "DATABASES"):
        _drivers.clear()
