"""The listener's reconnection backoff: no database."""

from django_jobs.db.notify import backoff_seconds


def test_backoff_seconds_doubles_from_one_second_up_to_thirty():
    assert [backoff_seconds(failures) for failures in range(1, 9)] == [
        1.0,
        2.0,
        4.0,
        8.0,
        16.0,
        30.0,
        30.0,
        30.0,
    ]


def test_backoff_seconds_follows_its_first_delay_and_cap():
    assert [backoff_seconds(failures, 0.05, 0.1) for failures in (0, 1, 2, 3)] == [
        0.05,
        0.05,
        0.1,
        0.1,
    ]
