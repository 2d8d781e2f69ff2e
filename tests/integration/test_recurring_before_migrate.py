"""``add_recurring_job`` before ``migrate``: one error that says what to do, and only then."""

import os
import subprocess
import sys

import pytest
from django.db import OperationalError, connection

from django_jobs import JobsError, add_recurring_job
from django_jobs.models import Job, RecurringJob
from tests.conftest import ROOT

ADVICE = (
    "was not saved: database 'default' has no table django_jobs_recurringjob yet: "
    'run `python manage.py migrate` first. Or declare it in DJANGO_JOBS["RECURRING"]'
)


@pytest.mark.django_db(transaction=True)
def test_add_recurring_job_on_a_database_never_migrated_says_to_migrate(fresh_database_url):
    # As a shell or a script would call it on a fresh database, in autocommit.
    code = (
        "import django; django.setup()\n"
        "from django_jobs import add_recurring_job\n"
        "add_recurring_job('nightly-report', '0 2 * * *', 'reports.add')\n"
    )
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={
            **os.environ,
            "DATABASE_URL": fresh_database_url,
            "DJANGO_SETTINGS_MODULE": "testproject.settings",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    last_line = done.stderr.strip().splitlines()[-1]
    assert last_line.startswith(
        f"django_jobs.exceptions.NotMigrated: recurring job 'nightly-report' {ADVICE}"
    ), done.stderr
    # One error, not the database's with ours on top of it.
    assert done.stderr.count("Traceback") == 1, done.stderr
    assert "no such table" not in done.stderr
    assert "does not exist" not in done.stderr


@pytest.mark.django_db
@pytest.mark.rolled_back_ddl
def test_add_recurring_job_in_a_transaction_without_the_table_says_to_migrate():
    # Inside the test's transaction, rolled back at its end; PostgreSQL refuses every
    # statement after a failed one, so the table is looked for after a savepoint.
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {connection.ops.quote_name(RecurringJob._meta.db_table)}")
    with pytest.raises(JobsError) as raised:
        add_recurring_job("nightly-report", "0 2 * * *", "tests.ok")
    assert str(raised.value).startswith(f"recurring job 'nightly-report' {ADVICE}")
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
    assert Job.objects.count() == 0  # the transaction is still usable


@pytest.mark.django_db
def test_add_recurring_job_passes_other_database_errors_through():
    # The table exists: an error of the same class is not a missing table, and is not renamed.
    failure = OperationalError("database is locked")

    def fail_on_schedules(execute, sql, params, many, context):
        if RecurringJob._meta.db_table in sql:
            raise failure
        return execute(sql, params, many, context)

    with connection.execute_wrapper(fail_on_schedules), pytest.raises(OperationalError) as raised:
        add_recurring_job("nightly-report", "0 2 * * *", "tests.ok")
    assert raised.value is failure
    add_recurring_job("nightly-report", "0 2 * * *", "tests.ok")
    assert RecurringJob.objects.get().name == "nightly-report"
