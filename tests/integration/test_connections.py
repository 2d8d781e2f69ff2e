import threading

import pytest
from django.db import connection, connections

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


def in_a_thread(step):
    """``step()``'s result, run on a thread of its own (a handler thread's connections)."""
    outcome = {}

    def run():
        try:
            outcome["value"] = step()
        except BaseException as exc:  # raised again on the test's thread
            outcome["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_a_thread_with_every_connection_finds_them_without_djangos_handler(monkeypatch):
    # Django's handler answers through asgiref's Local at some 2 µs an access: a twentieth
    # of a no-op job, asked between every two jobs. Once a thread has a connection of every
    # alias its list is kept; it is still tidied as before.
    asked = []
    real_all = connections.all
    monkeypatch.setattr(connections, "all", lambda **kw: asked.append(kw) or real_all(**kw))

    def jobs():
        tidy_connections()  # no connection yet: nothing kept
        connection.ensure_connection()
        tidy_connections()
        connection.set_autocommit(False)  # a handler leaves it outside autocommit
        tidy_connections()
        closed = connection.connection is None
        tidy_connections()
        return closed, len(asked)

    # Asked until the thread had its connection, and then once.
    assert in_a_thread(jobs) == (True, 2)
