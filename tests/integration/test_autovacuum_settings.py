"""PostgreSQL: the jobs tables carry their own autovacuum settings (migration 0019), and
its reverse gives them back to the server's."""

from __future__ import annotations

import importlib

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's settings"),
]

MIGRATION = importlib.import_module("django_jobs.migrations.0019_jobs_tables_autovacuum")
TABLES = ("django_jobs_job", "django_jobs_attempt")


def options() -> dict[str, dict[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, reloptions FROM pg_class WHERE relname = ANY(%s)", [list(TABLES)]
        )
        return {
            name: dict(option.split("=", 1) for option in values or [])
            for name, values in cursor.fetchall()
        }


def test_the_jobs_tables_are_vacuumed_at_a_hundredth_not_a_fifth():
    assert options() == dict.fromkeys(TABLES, MIGRATION.SETTINGS)


def test_migrating_back_gives_them_the_servers_settings():
    executor = MigrationExecutor(connection)
    try:
        executor.migrate([("django_jobs", "0018_job_trace_context")])
        assert options() == dict.fromkeys(TABLES, {})
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes("django_jobs"))
    assert options() == dict.fromkeys(TABLES, MIGRATION.SETTINGS)
