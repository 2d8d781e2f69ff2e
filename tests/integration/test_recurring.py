import logging
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection, transaction
from freezegun import freeze_time

from django_jobs import ScheduleError, UnknownJob, add_recurring_job, remove_recurring_job
from django_jobs.checks import check_settings
from django_jobs.maintenance.scheduler import enqueue_due
from django_jobs.models import Job, JobStatus, RecurringJob
from django_jobs.recurring import sync_from_settings
from django_jobs.signals import job_enqueued
from tests.conftest import ROOT

pytestmark = pytest.mark.django_db

UTC = timezone.utc
T0 = datetime(2026, 1, 5, 12, 0, 30, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


@contextmanager
def scheduler_fires_after_next_read(now: datetime) -> Iterator[None]:
    """Run ``enqueue_due(now)`` right after the next read of a schedule's ``next_run_at``.

    A scheduler firing between the read and the write of whatever runs inside,
    placed deterministically with Django's own ``execute_wrapper`` hook.
    """
    fired: list[int] = []

    def wrapper(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        result = execute(sql, *args)
        if not fired and sql.startswith("SELECT") and "next_run_at" in sql:
            fired.append(0)
            fired[0] = enqueue_due(now)
        return result

    with connection.execute_wrapper(wrapper):
        yield
    assert fired == [1], "the scheduler did not fire in between"


@freeze_time(T0)
def test_add_recurring_job_computes_the_first_run_in_its_zone():
    schedule = add_recurring_job(
        "nightly-report",
        "0 2 * * *",
        "tests.ok",
        {"kind": "full"},
        queue="reports",
        timezone="Europe/Paris",
    )
    assert schedule.next_run_at == datetime(2026, 1, 6, 1, 0, tzinfo=UTC)  # 02:00 CET
    assert (schedule.job_name, schedule.payload, schedule.queue) == (
        "tests.ok",
        {"kind": "full"},
        "reports",
    )
    assert schedule.enabled and schedule.last_run_at is None


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"cron": "0 2 * *"}, ScheduleError, "'bad-one'.*not a valid cron"),
        ({"timezone": "Europe/Atlantis"}, ScheduleError, "'bad-one'.*unknown time zone"),
        ({"job": "no.such.job"}, UnknownJob, "'bad-one'.*no.such.job"),
        ({"cron": "0 0 30 2 *"}, ScheduleError, r"'bad-one': '0 0 30 2 \*' never fires"),
        ({"cron": "0 0 31 4,6 *"}, ScheduleError, r"'bad-one': '0 0 31 4,6 \*' never fires"),
        ({"cron": "0 25 * * *"}, ScheduleError, "'bad-one'.*hour '25' is out of range 0-23"),
        ({"max_attempts": 0}, ScheduleError, "'bad-one': max_attempts must be a positive"),
        ({"max_attempts": "3"}, ScheduleError, "'bad-one': max_attempts must be a positive"),
        ({"priority": "high"}, ScheduleError, "'bad-one': priority must be an integer"),
        ({"priority": 1.5}, ScheduleError, "'bad-one': priority must be an integer"),
        ({"queue": ""}, ScheduleError, "'bad-one': queue must be a non-empty string"),
        ({"queue": 7}, ScheduleError, "'bad-one': queue must be a non-empty string"),
        ({"queue": "q" * 101}, ScheduleError, "'bad-one': queue must be .* at most 100"),
    ],
)
def test_add_recurring_job_refuses_bad_schedules_naming_them(kwargs, error, message):
    arguments = {"cron": "@hourly", "job": "tests.ok", "timezone": "UTC", **kwargs}
    options = {
        key: arguments[key] for key in ("queue", "priority", "max_attempts") if key in kwargs
    }
    with pytest.raises(error, match=message):
        add_recurring_job(
            "bad-one",
            arguments["cron"],
            arguments["job"],
            timezone=arguments["timezone"],
            **options,
        )
    assert issubclass(ScheduleError, ValueError)
    assert not RecurringJob.objects.exists()


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("n" * 201, {}),
        ("n\x00", {}),
        ("n\ud800", {}),
        ("bad-one", {"queue": "q\x00"}),
        ("bad-one", {"queue": "q\udfff"}),
        ("bad-one", {"max_attempts": 2**31}),
    ],
    ids=repr,
)
def test_add_recurring_job_refuses_what_no_database_stores_and_the_transaction_goes_on(
    name, options
):
    with transaction.atomic():
        add_recurring_job("kept", "@daily", "tests.ok")
        with pytest.raises(ValueError, match="at most (200|100|2147483647)"):
            add_recurring_job(name, "@hourly", "tests.ok", **options)
        assert list(RecurringJob.objects.values_list("name", flat=True)) == ["kept"]
        add_recurring_job("after", "@hourly", "tests.ok")
    assert sorted(RecurringJob.objects.values_list("name", flat=True)) == ["after", "kept"]


def test_schedules_fire_once_per_occurrence_as_time_moves():
    with freeze_time(T0):
        add_recurring_job(
            "every-5",
            "*/5 * * * *",
            "tests.ok",
            {"n": 1},
            priority=3,
            max_attempts=2,
            queue="emails",
        )
    assert enqueue_due(at(4)) == 0
    assert enqueue_due(at(4.5)) == 1  # 12:05
    assert enqueue_due(at(4.5)) == 0  # already fired
    assert enqueue_due(at(9.5)) == 1  # 12:10
    jobs = list(Job.objects.order_by("id"))
    assert [job.run_at for job in jobs] == [at(4.5), at(9.5)]
    job = jobs[0]
    assert (job.name, job.payload, job.queue, job.priority, job.max_attempts) == (
        "tests.ok",
        {"n": 1},
        "emails",
        3,
        2,
    )
    assert {job.schedule for job in jobs} == {"every-5"}  # what its admin page lists
    schedule = RecurringJob.objects.get()
    assert (schedule.last_run_at, schedule.next_run_at) == (at(9.5), at(14.5))


def test_re_adding_the_same_schedule_keeps_next_run_at_and_a_new_cron_starts_from_now():
    with freeze_time(T0):
        first = add_recurring_job("r", "0 * * * *", "tests.ok")
    assert first.next_run_at == datetime(2026, 1, 5, 13, 0, tzinfo=UTC)
    with freeze_time(at(90)):  # a restart after the 13:00 occurrence was missed
        again = add_recurring_job("r", "0 * * * *", "tests.ok", {"new": "payload"})
        assert again.next_run_at == first.next_run_at  # not skipped...
        assert enqueue_due(at(90)) == 1  # ...it fires at startup, once
        assert enqueue_due(at(90)) == 0
        changed = add_recurring_job("r", "30 * * * *", "tests.ok")
    assert changed.next_run_at == datetime(2026, 1, 5, 14, 30, tzinfo=UTC)  # from now
    assert Job.objects.get().payload == {"new": "payload"}


def test_a_day_of_downtime_collapses_into_one_run_and_the_next_comes_from_now():
    with freeze_time(T0):
        add_recurring_job("minutely", "* * * * *", "tests.ok")
    back = at(60 * 24)
    assert enqueue_due(back) == 1
    assert enqueue_due(back) == 0
    assert Job.objects.count() == 1
    assert RecurringJob.objects.get().next_run_at == datetime(2026, 1, 6, 12, 1, tzinfo=UTC)


def test_overlap_false_skips_an_occurrence_while_the_previous_run_is_live(caplog):
    with freeze_time(T0):
        add_recurring_job("single", "* * * * *", "tests.ok", overlap=False)
    assert enqueue_due(at(1)) == 1
    with caplog.at_level(logging.INFO, logger="django_jobs"):
        assert enqueue_due(at(2)) == 0  # previous run still pending: skipped
    assert "skipped" in caplog.text
    Job.objects.update(status=JobStatus.SUCCEEDED)
    assert enqueue_due(at(3)) == 1
    assert Job.objects.count() == 2


def test_overlap_true_enqueues_while_the_previous_run_is_live():
    with freeze_time(T0):
        add_recurring_job("many", "* * * * *", "tests.ok")
    assert enqueue_due(at(1)) == 1
    assert enqueue_due(at(2)) == 1
    assert Job.objects.filter(status=JobStatus.PENDING).count() == 2


@pytest.mark.parametrize("cron", ["every tuesday", "0 0 30 2 *"])
def test_a_row_edited_to_a_bad_cron_is_logged_disabled_and_skipped(caplog, cron):
    with freeze_time(T0):
        add_recurring_job("broken", "* * * * *", "tests.ok")
        add_recurring_job("fine", "* * * * *", "tests.ok", {"fine": True})
    RecurringJob.objects.filter(name="broken").update(cron=cron)
    with caplog.at_level(logging.ERROR, logger="django_jobs"):
        assert enqueue_due(at(1)) == 1
    assert "'broken' not fired" in caplog.text
    assert "ScheduleError" in caplog.text and "schedule disabled" in caplog.text
    assert Job.objects.get().payload == {"fine": True}
    assert not RecurringJob.objects.get(name="broken").enabled  # nothing to wait for
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="django_jobs"):
        assert enqueue_due(at(2)) == 1
    assert caplog.text == ""  # logged once, not on every tick


@pytest.mark.parametrize(
    ("bad", "error"),
    [({"job_name": "no.such.job"}, "UnknownJob"), ({"max_attempts": 0}, "ValueError")],
)
def test_a_schedule_that_cannot_make_a_job_skips_the_occurrence_and_tries_the_next(
    caplog, bad, error
):
    with freeze_time(T0):
        add_recurring_job("hand-edited", "*/5 * * * *", "tests.ok")  # next: 12:05
    RecurringJob.objects.filter(name="hand-edited").update(**bad)
    with caplog.at_level(logging.ERROR, logger="django_jobs"):
        assert enqueue_due(at(4.5)) == 0
        assert enqueue_due(at(5)) == 0  # moved on: not tried again on every tick
    assert caplog.text.count("'hand-edited' not fired for 2026-01-05T12:05:00+00:00") == 1
    assert f"{error}: " in caplog.text
    assert "next try at 2026-01-05T12:10:00+00:00" in caplog.text
    schedule = RecurringJob.objects.get()
    assert (schedule.enabled, schedule.next_run_at, schedule.last_run_at) == (True, at(9.5), None)
    RecurringJob.objects.update(job_name="tests.ok", max_attempts=None)  # fixed
    assert enqueue_due(at(9.5)) == 1
    assert Job.objects.get().run_at == at(9.5)


def test_schedules_that_fail_do_not_starve_the_one_behind_them(caplog):
    due = at(1) - timedelta(seconds=30)  # 12:01
    RecurringJob.objects.bulk_create(
        RecurringJob(
            name=f"unregistered-{index:03}",
            job_name="no.such.job",
            cron="* * * * *",
            next_run_at=due - timedelta(seconds=index + 1),
        )
        for index in range(150)
    )
    RecurringJob.objects.create(name="good", job_name="tests.ok", cron="* * * * *", next_run_at=due)
    with caplog.at_level(logging.ERROR, logger="django_jobs"):
        assert enqueue_due(at(1)) == 1  # one call reaches the good one behind 150 bad
    assert Job.objects.get().name == "tests.ok"
    errors = [record.getMessage() for record in caplog.records]
    assert len(errors) == 150
    assert all("not fired" in error and "no.such.job" in error for error in errors)
    assert {record.schedule for record in caplog.records} == {  # type: ignore[attr-defined]
        f"unregistered-{index:03}" for index in range(150)
    }


def test_enqueue_due_fires_every_due_schedule_in_one_call_page_by_page():
    # Pages of two, read past the last row of each page: one call reaches all five.
    with freeze_time(T0):
        for index in range(5):
            add_recurring_job(f"s{index}", "* * * * *", "tests.ok")
    assert enqueue_due(at(1), batch=2) == 5
    assert enqueue_due(at(1), batch=2) == 0


def test_add_recurring_job_never_writes_back_a_next_run_at_a_scheduler_advanced():
    with freeze_time(T0):
        add_recurring_job("r", "* * * * *", "tests.ok", {"v": 1})  # next: 12:01
        with scheduler_fires_after_next_read(at(1)):  # fires 12:01, moves to 12:02
            schedule = add_recurring_job("r", "* * * * *", "tests.ok", {"v": 2})
    assert (schedule.next_run_at, schedule.last_run_at) == (at(1.5), at(0.5))
    assert schedule.payload == {"v": 2}
    assert enqueue_due(at(1)) == 0  # 12:01 is not enqueued again
    assert Job.objects.count() == 1


def test_add_recurring_job_restart_does_not_undo_a_concurrent_fire():
    # This host's clock (12:00:30) is behind the scheduler's (12:01:30), and the
    # changed cron restarts the schedule from now while that scheduler fires 12:01.
    with freeze_time(T0):
        add_recurring_job("r", "* * * * *", "tests.ok")  # next: 12:01
        with scheduler_fires_after_next_read(at(1)):
            schedule = add_recurring_job("r", "0-59 * * * *", "tests.ok")
    assert schedule.next_run_at == at(1.5)  # 12:02: strictly after the occurrence just fired
    assert enqueue_due(at(1)) == 0
    assert [job.run_at for job in Job.objects.all()] == [at(0.5)]


def test_disabled_schedules_do_not_fire_and_remove_deletes():
    with freeze_time(T0):
        add_recurring_job("off", "* * * * *", "tests.ok", enabled=False)
        add_recurring_job("gone", "* * * * *", "tests.ok")
    assert remove_recurring_job("gone") is True
    assert remove_recurring_job("gone") is False
    assert enqueue_due(at(10)) == 0


def test_sync_from_settings_adds_updates_and_disables_removed(settings):
    settings.DJANGO_JOBS = {
        "RECURRING": {
            "nightly": {"cron": "0 2 * * *", "job": "tests.ok", "timezone": "Europe/Paris"},
            "hourly": {"cron": "@hourly", "job": "tests.ok", "payload": {"h": 1}},
        }
    }
    with freeze_time(T0):
        add_recurring_job("from-code", "@daily", "tests.ok")
        sync_from_settings()
        nightly = RecurringJob.objects.get(name="nightly")
        assert nightly.source == "settings" and nightly.timezone == "Europe/Paris"
        settings.DJANGO_JOBS = {"RECURRING": {"hourly": {"cron": "@hourly", "job": "tests.ok"}}}
        sync_from_settings()
    nightly.refresh_from_db()
    assert (nightly.enabled, nightly.source) == (False, "settings_removed")
    assert RecurringJob.objects.get(name="from-code").enabled  # declared in code: untouched
    assert RecurringJob.objects.get(name="hourly").payload is None


def test_check_recurring_settings_name_the_schedule(settings):
    settings.DJANGO_JOBS = {
        "RECURRING": {
            "bad-cron": {"cron": "0 2 * *", "job": "tests.ok"},
            "bad-zone": {"cron": "@daily", "job": "tests.ok", "timezone": "Nowhere/City"},
            "bad-job": {"cron": "@daily", "job": "not.registered"},
            "bad-key": {"cron": "@daily", "job": "tests.ok", "every": "day"},
            "no-cron": {"job": "tests.ok"},
            "good": {"cron": "@daily", "job": "tests.ok"},
        }
    }
    messages = [error.msg for error in check_settings()]
    assert len(messages) == 5
    for name in ("bad-cron", "bad-zone", "bad-job", "bad-key", "no-cron"):
        assert any(f"[{name!r}]" in message for message in messages), name


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cron": "0 0 30 2 *"}, "'0 0 30 2 *' never fires"),
        ({"cron": "0 25 * * *"}, "hour '25' is out of range 0-23"),
        ({"max_attempts": 0}, "max_attempts must be a positive integer, got 0"),
        ({"priority": "high"}, "priority must be an integer, got 'high'"),
        ({"queue": ""}, "queue must be a non-empty string"),
    ],
)
def test_check_recurring_settings_refuse_what_could_never_fire(settings, options, message):
    settings.DJANGO_JOBS = {
        "RECURRING": {"broken": {"cron": "@daily", "job": "tests.ok", **options}}
    }
    errors = check_settings()
    assert [error.id for error in errors] == ["django_jobs.E006"]
    assert errors[0].msg.startswith("DJANGO_JOBS['RECURRING']['broken']: ")
    assert message in errors[0].msg


@pytest.mark.django_db(transaction=True)
def test_runjobs_refuses_to_start_with_a_cron_that_never_fires(settings):
    settings.DJANGO_JOBS = {"RECURRING": {"leap": {"cron": "0 0 30 2 *", "job": "tests.ok"}}}
    with pytest.raises(SystemCheckError, match=r"\['leap'\]: '0 0 30 2 \*' never fires"):
        call_command("runjobs", "--burst", skip_checks=False)
    assert not RecurringJob.objects.exists()


def test_worker_tick_fires_due_schedules(worker, clock):
    with freeze_time(clock.now()):
        add_recurring_job("tick", "* * * * *", "tests.ok")
    clock.advance(61)
    result = worker().run_once()
    assert (result.fired, result.succeeded) == (1, 1)


@pytest.mark.django_db(transaction=True)
def test_runjobs_burst_syncs_schedules_from_settings(settings):
    settings.DJANGO_JOBS = {
        "POLL_SECONDS": 0.01,
        "RECURRING": {"synced": {"cron": "@daily", "job": "tests.ok"}},
    }
    call_command("runjobs", "--burst", verbosity=0)
    assert RecurringJob.objects.get(name="synced").source == "settings"


def test_docs_post_migrate_recipe_adds_schedules_on_a_fresh_database(tmp_path):
    # The recipe from docs/how-to/recurring.md, as a project would paste it, migrated from scratch.
    docs = (ROOT / "docs" / "how-to" / "recurring.md").read_text()
    recipe = next(block for block in docs.split("```python\n") if "# reports/apps.py" in block)
    app = tmp_path / "reports"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "apps.py").write_text(recipe.split("```")[0])
    (app / "jobs.py").write_text(
        "from django_jobs import job\n\n\n@job('reports.nightly')\ndef nightly(ctx, payload):\n"
        "    pass\n"
    )
    database = tmp_path / "fresh.sqlite3"
    (tmp_path / "recipe_settings.py").write_text(
        "SECRET_KEY = 'recipe'\nUSE_TZ = True\nDEFAULT_AUTO_FIELD = 'django.db.models.AutoField'\n"
        "INSTALLED_APPS = ['django.contrib.contenttypes', 'django_jobs', 'reports']\n"
        "DATABASES = {'default': {'ENGINE': 'django.db.backends.sqlite3', "
        f"'NAME': {str(database)!r}, 'OPTIONS': {{'transaction_mode': 'IMMEDIATE', "
        "'init_command': 'PRAGMA journal_mode=WAL;'}}}\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}",
        "DJANGO_SETTINGS_MODULE": "recipe_settings",
    }
    for _ in range(2):  # a fresh database, then again: the receiver is idempotent
        done = subprocess.run(  # noqa: S603
            [sys.executable, "-W", "error", "-m", "django", "migrate", "-v0"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT name, cron, timezone FROM django_jobs_recurringjob").fetchall()
    assert rows == [("nightly-report", "0 2 * * *", "Europe/Paris")]


def test_a_recurring_occurrence_is_announced_once_when_it_commits(
    django_capture_on_commit_callbacks,
):
    heard: list[dict[str, Any]] = []

    def receiver(sender: Any, signal: Any, **details: Any) -> None:
        heard.append(details)

    with freeze_time(T0):
        add_recurring_job("announced", "* * * * *", "tests.ok", queue="emails", overlap=False)
    job_enqueued.connect(receiver, sender=Job)
    try:
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            assert enqueue_due(at(1)) == 1
            assert enqueue_due(at(1)) == 0  # fired already
            assert enqueue_due(at(2)) == 0  # its previous run is live: skipped
    finally:
        job_enqueued.disconnect(receiver, sender=Job)
    job = Job.objects.get()
    assert heard == [{"job_id": job.pk, "name": "tests.ok", "queue": "emails"}]
    assert len(callbacks) == 1
