"""What ``runjobs`` says at start-up: jobs it will not run, queues named nowhere, the
database checks."""

import logging
import sys
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError

from django_jobs import job, schedule_job, schedule_jobs
from django_jobs.models import Job, JobStatus
from django_jobs.registry import unregister
from django_jobs.worker.hosting.startup import log_unserved_due, unserved_due_counts
from testproject.example.management.commands.demo import python_command

pytestmark = pytest.mark.django_db(transaction=True)


def unserved_records(caplog):
    return [r for r in caplog.records if getattr(r, "event", None) == "unserved_jobs"]


def test_runjobs_logs_due_jobs_on_queues_it_does_not_serve(caplog):
    schedule_jobs([{"job": "tests.emails"}] * 3)
    schedule_job("tests.ok", queue="nowhere")
    schedule_job("tests.ok")  # served: run and not counted
    with caplog.at_level(logging.INFO, logger="django_jobs"):
        call_command("runjobs", "--burst", "--queue", "default", verbosity=1)
    [record] = unserved_records(caplog)
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "4 due job(s) on queues this worker does not serve: 'emails' (3), 'nowhere' (1); "
        "'nowhere' not in DJANGO_JOBS['QUEUES'], so only a worker started with --queue runs them"
    )
    assert record.queues == {"emails": 3, "nowhere": 1}
    assert Job.objects.filter(status=JobStatus.PENDING).count() == 4


def test_runjobs_logs_listed_but_unserved_queues_at_info(caplog):
    schedule_job("tests.emails")
    with caplog.at_level(logging.INFO, logger="django_jobs"):
        call_command("runjobs", "--burst", "--queue", "default", verbosity=1)
    [record] = unserved_records(caplog)
    assert record.levelno == logging.INFO
    assert record.getMessage() == "1 due job(s) on queues this worker does not serve: 'emails' (1)"


def test_runjobs_says_nothing_when_it_serves_every_queue_with_due_jobs(caplog):
    schedule_job("tests.emails")
    with caplog.at_level(logging.INFO, logger="django_jobs"):
        call_command("runjobs", "--burst", verbosity=1)
    assert unserved_records(caplog) == []
    assert Job.objects.get().status == JobStatus.SUCCEEDED


def test_unserved_due_counts_skip_jobs_not_yet_due_and_take_one_query(
    clock, django_assert_num_queries
):
    schedule_job("tests.emails", run_at=clock.now())
    schedule_job("tests.emails", run_at=clock.now().replace(year=2030))
    schedule_job("tests.ok", queue="other", run_at=clock.now())
    with django_assert_num_queries(1):
        counts = unserved_due_counts(["default"], clock.now(), "default")
    assert counts == {"emails": 1, "other": 1}
    assert log_unserved_due(["default", "emails", "other"], "default", clock.now()) == 0


def test_runjobs_refuses_use_tz_false_in_its_system_checks(settings):
    # Some of Django's own checks ask the database about its features: hence not a unit test.
    settings.USE_TZ = False
    with pytest.raises(SystemCheckError, match=r"django_jobs\.E010"):
        call_command("runjobs", "--burst", skip_checks=False)


def test_demo_hints_use_the_python_it_runs_under(settings, capsys):
    settings.DJANGO_JOBS = {**settings.DJANGO_JOBS, "RETRY_BASE_SECONDS": 0, "POLL_SECONDS": 0.02}
    call_command("demo")
    out = capsys.readouterr().out
    python = python_command(sys.executable, Path(django_settings.BASE_DIR))
    assert f"See them in the admin: {python} manage.py createsuperuser, " in out
    assert f"{python} manage.py runserver" in out


# -- the database checks, at start-up ---------------------------------------------------------


@pytest.fixture
def database_check():
    """Register a check of the project's own, tagged ``database``, giving ``messages``."""
    from django.core.checks import Tags, register, registry

    given: list = []

    def project_check(app_configs=None, databases=None, **kwargs):
        return list(given) if databases else []

    register(project_check, Tags.database)
    yield given
    registry.registry.registered_checks.discard(project_check)


def test_runjobs_logs_the_database_checks_as_warnings_and_serves(database_check, caplog):
    from django.core.checks import Warning

    database_check.append(Warning("Replica lag above 5 s.", hint="Look.", id="project.W001"))
    job = schedule_job("tests.ok")
    with caplog.at_level(logging.INFO, logger="django_jobs"):
        call_command("runjobs", "--burst", verbosity=1)
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "system_check"]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "(project.W001) Replica lag above 5 s. HINT: Look."
    assert record.check_id == "project.W001"
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED


def test_runjobs_stops_on_a_database_check_error_as_migrate_does(database_check):
    from django.core.checks import Error

    database_check.append(Error("The jobs tables are on a read-only replica.", id="project.E001"))
    with pytest.raises(CommandError) as raised:
        call_command("runjobs", "--burst")
    assert str(raised.value) == (
        "System check identified errors:\n"
        "?: (project.E001) The jobs tables are on a read-only replica."
    )


# -- --queue NAME that the project names nowhere ----------------------------------------------


def unknown_queue_records(caplog):
    return [r for r in caplog.records if getattr(r, "event", None) == "unknown_queue"]


def test_runjobs_queue_typo_warns_with_did_you_mean_and_still_serves_it(caplog):
    job = schedule_job("tests.ok", queue="emial")
    with caplog.at_level(logging.INFO, logger="django_jobs"):
        call_command("runjobs", "--burst", "--queue", "emial", verbosity=1)
    [record] = unknown_queue_records(caplog)
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "--queue 'emial' is not in DJANGO_JOBS['QUEUES'] and no registered job, schedule or "
        "task backend uses it; did you mean 'emails'? serving it anyway (a job can be "
        "scheduled onto any queue)"
    )
    assert record.queue == "emial"
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED


def test_runjobs_queue_far_from_any_known_one_warns_without_a_guess(caplog):
    with caplog.at_level(logging.INFO, logger="django_jobs"):
        call_command("runjobs", "--burst", "--queue", "zzz", verbosity=1)
    [record] = unknown_queue_records(caplog)
    assert "uses it; serving it anyway" in record.getMessage()


def test_runjobs_queue_that_a_job_schedule_or_setting_names_is_not_warned_of(settings, caplog):
    @job("tests.reports", queue="reports")
    def reports(ctx, payload):
        return None

    settings.DJANGO_JOBS = {
        **settings.DJANGO_JOBS,
        "RECURRING": {"nightly": {"cron": "@daily", "job": "tests.ok", "queue": "nightly"}},
    }
    try:
        with caplog.at_level(logging.INFO, logger="django_jobs"):
            call_command(
                "runjobs",
                "--burst",
                *("--queue", "default", "--queue", "emails", "--queue", "reports"),
                *("--queue", "nightly"),
                verbosity=1,
            )
    finally:
        unregister("tests.reports")
    assert unknown_queue_records(caplog) == []
