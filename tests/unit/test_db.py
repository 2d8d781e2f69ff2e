"""Which driver serves a database: the vendor is read in one place."""

from django_jobs.db import get_driver
from django_jobs.db.postgresql import PostgresDriver
from django_jobs.db.sqlite import SQLiteDriver


def test_get_driver_follows_the_database_vendor():
    from django.db import connection

    driver = get_driver()
    expected = {"postgresql": PostgresDriver, "sqlite": SQLiteDriver}[connection.vendor]
    assert type(driver) is expected
