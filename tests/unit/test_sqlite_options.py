"""The ``OPTIONS`` the SQLite checks ask for: django-jobs' three, and the project's others."""

from django_jobs.db.sqlite import wanted_options


def test_wanted_options_of_no_options_are_the_three_django_jobs_needs():
    assert wanted_options({}) == {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL;",
    }


def test_wanted_options_keep_the_projects_timeout_options_and_statements():
    given = {
        "timeout": 45,
        "transaction_mode": "DEFERRED",
        "init_command": "PRAGMA synchronous=NORMAL; PRAGMA journal_mode = truncate;",
        "check_same_thread": False,
    }
    assert wanted_options(given) == {
        "transaction_mode": "IMMEDIATE",
        "timeout": 45,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "check_same_thread": False,
    }
