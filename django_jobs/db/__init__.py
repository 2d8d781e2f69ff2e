"""The database seam: every hot-path statement, one module per database."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from .base import ROW_ERRORS, DatabaseBusy, Driver
from .records import ClaimedJob, ClaimRequest

__all__ = ["ROW_ERRORS", "ClaimRequest", "ClaimedJob", "DatabaseBusy", "Driver", "get_driver"]


def get_driver(using: str = "default") -> Driver:
    """The driver for the database behind ``using``."""
    vendor = connections[using].vendor
    if vendor == "postgresql":
        from .postgresql import PostgresDriver

        return PostgresDriver(using)
    if vendor == "sqlite":
        from .sqlite import SQLiteDriver

        return SQLiteDriver(using)
    raise ImproperlyConfigured(
        f"django-jobs runs on PostgreSQL and SQLite; the database {using!r} is {vendor}"
    )
