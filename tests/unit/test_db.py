"""Which driver serves a database: the vendor is read in one place."""

from django_jobs.db import get_driver
from django_jobs.db.mysql import MySQLDriver
from django_jobs.db.postgresql import PostgresDriver
from django_jobs.db.sqlite import SQLiteDriver


def test_get_driver_follows_the_database_vendor():
    from django.db import connection

    driver = get_driver()
    expected = {"postgresql": PostgresDriver, "sqlite": SQLiteDriver, "mysql": MySQLDriver}[
        connection.vendor
    ]
    assert type(driver) is expected


def test_get_driver_is_one_per_alias_made_again_when_the_settings_change():
    """A driver keeps the texts it built; one made under other settings is not kept."""
    from django.test import override_settings

    first = get_driver()
    assert get_driver() is first
    with override_settings(DJANGO_JOBS={"LISTEN": False}):
        changed = get_driver()
        assert changed is not first and changed.listen is False
    assert get_driver() is not changed
