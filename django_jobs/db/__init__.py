"""The database seam: every hot-path statement, one module per database."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from .base import ROW_ERRORS, DatabaseBusy, Driver
from .records import ClaimedJob, ClaimRequest

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
    vendor. Its class attributes say what the database can do."""
    vendor = connections[using].vendor
    if vendor == "postgresql":
        from .postgresql import PostgresDriver

        return PostgresDriver
    if vendor == "sqlite":
        from .sqlite import SQLiteDriver

        return SQLiteDriver
    raise ImproperlyConfigured(
        f"django-jobs runs on PostgreSQL and SQLite; the database {using!r} is {vendor}"
    )


def get_driver(using: str = "default") -> Driver:
    """The driver for the database behind ``using``."""
    return driver_class(using)(using)
