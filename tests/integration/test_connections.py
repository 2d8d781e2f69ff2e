import pytest
from django.db import connection

from django_jobs.worker.connections import tidy_connections

pytestmark = pytest.mark.django_db(transaction=True)


def test_tidy_connections_keeps_a_healthy_connection_whatever_conn_max_age():
    connection.ensure_connection()
    raw = connection.connection
    connection.close_at = 0  # what CONN_MAX_AGE = 0 sets: "close after the request"
    tidy_connections()
    assert connection.connection is raw  # no reconnect per job


def test_tidy_connections_closes_a_connection_left_outside_autocommit():
    connection.ensure_connection()
    connection.set_autocommit(False)
    tidy_connections()
    assert connection.connection is None
    connection.ensure_connection()
    assert connection.get_autocommit()


def test_tidy_connections_honours_a_positive_conn_max_age(settings):
    connection.ensure_connection()
    saved = connection.settings_dict["CONN_MAX_AGE"]
    connection.settings_dict["CONN_MAX_AGE"] = 60
    try:
        connection.close_at = 0  # outlived its age
        tidy_connections()
        assert connection.connection is None
    finally:
        connection.settings_dict["CONN_MAX_AGE"] = saved
