"""``manage.py jobs``: status, list, show, retry, cancel, prune; call_command and a real process."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import override_settings
from freezegun import freeze_time

from django_jobs.maintenance.cleaner import prune_statuses
from django_jobs.management.arguments import parse_duration
from django_jobs.models import Attempt, AttemptOutcome, Job, JobStatus, Leader, WorkerProcess
from tests.conftest import START, by_queue, jobs, jobs_json, manage
from tests.support.leaders import lease_of

pytestmark = pytest.mark.django_db

MakeJob = Callable[..., Job]
HOUR = timedelta(hours=1)


def finished(make_job: MakeJob, status: str, **overrides: Any) -> Job:
    return make_job(status=status, finished_at=START, **overrides)


def register(
    worker_id: str, heartbeat_age: timedelta, queues: list[str], **fields: Any
) -> WorkerProcess:
    return WorkerProcess.objects.create(
        id=worker_id,
        host="host",
        pid=1,
        queues=queues,
        started_at=START - HOUR,
        last_heartbeat_at=START - heartbeat_age,
        **fields,
    )


def lead(owner: str, expires_at: Any = None) -> Leader:
    return lease_of(owner, START, expires_at)


def test_jobs_status_splits_pending_into_due_scheduled_and_retrying(make_job: MakeJob) -> None:
    make_job(run_at=START - timedelta(seconds=90))
    make_job(run_at=START)
    make_job(run_at=START + HOUR)
    make_job(run_at=START + HOUR, attempts_used=1)
    make_job(run_at=START + HOUR, attempts_used=2)
    make_job(status=JobStatus.RUNNING, lease_owner="w", lease_expires_at=START + HOUR)
    finished(make_job, JobStatus.SUCCEEDED)
    finished(make_job, JobStatus.SUCCEEDED)
    finished(make_job, JobStatus.DEAD_LETTERED)
    finished(make_job, JobStatus.CANCELLED, queue="emails")
    make_job(queue="emails", run_at=START + HOUR)
    make_job(status=JobStatus.WAITING)
    queues = by_queue(jobs_json("status"))
    assert {key: queues["default"][key] for key in list(queues["default"])[:10]} == {
        "queue": "default",
        "waiting": 1,
        "due": 2,
        "scheduled": 1,
        "retrying": 2,
        "running": 1,
        "succeeded": 2,
        "dead_lettered": 1,
        "cancelled": 0,
        "oldest_due_at": (START - timedelta(seconds=90)).isoformat(),
    }
    assert queues["default"]["pending"] == 5
    assert queues["default"]["oldest_due_age_seconds"] == 90.0
    assert (queues["emails"]["cancelled"], queues["emails"]["scheduled"]) == (1, 1)
    assert queues["emails"]["oldest_due_at"] is None
    assert queues["emails"]["oldest_due_age_seconds"] is None


def test_jobs_status_shows_queues_that_only_the_jobs_name(make_job: MakeJob) -> None:
    make_job(queue="reports")
    assert sorted(by_queue(jobs_json("status"))) == ["default", "emails", "keyed", "reports"]


def test_jobs_status_lists_live_workers_only_with_their_running_jobs(make_job: MakeJob) -> None:
    register("fresh", timedelta(seconds=10), ["default"])
    register("stale", timedelta(seconds=301), ["emails"])  # LEASE_SECONDS is 300
    held = make_job(status=JobStatus.RUNNING, lease_owner="fresh", lease_expires_at=START + HOUR)
    make_job(queue="emails")
    document = jobs_json("status")
    assert [(w["id"], w["running"], w["running_job_ids"]) for w in document["workers"]] == [
        ("fresh", 1, [held.pk])
    ]
    queues = by_queue(document)
    assert queues["default"]["served"] is True
    assert queues["emails"]["served"] is False
    text = jobs("status")
    assert "10 s ago" in text
    assert "stale" not in text
    assert text.splitlines()[3].split()[-1] == "yes"  # default
    assert text.splitlines()[4].endswith("NO WORKER")  # emails


def test_jobs_status_reads_a_fixed_number_of_queries(
    make_job: MakeJob, django_assert_num_queries: Any
) -> None:
    for queue in ("default", "emails", "a", "b"):
        make_job(queue=queue)
        finished(make_job, JobStatus.SUCCEEDED, queue=queue)
        register(queue, timedelta(), [queue])
    lead("default")
    # waiting, pending, running, the paused queues, finished, workers, the workers' running
    # jobs, the leader lease; the jobs tables' health in a savepoint inside the test's
    # transaction: the recent claim latency, and where the database tells more, its reads
    # (PostgreSQL 3, MariaDB 2)
    health = 2 + 1 + {"postgresql": 3, "mysql": 2}.get(connection.vendor, 0)
    with django_assert_num_queries(8 + health):
        jobs("status")


def test_jobs_status_marks_the_leader_and_says_since_when(make_job: MakeJob) -> None:
    register("lone", timedelta(seconds=10), ["default"])
    register("boss", timedelta(seconds=10), ["default"], process_count=2)
    register("boss-1", timedelta(seconds=10), ["default"], supervisor="boss")
    register("boss-2", timedelta(seconds=10), ["default"], supervisor="boss")
    lead("boss-2")

    document = jobs_json("status")
    assert {w["id"]: w["leads"] for w in document["workers"]} == {
        "lone": False,
        "boss": False,
        "boss-1": False,
        "boss-2": True,
    }
    assert document["leader"] == {
        "owner": "boss-2",
        "epoch": 3,
        "elected_at": (START - timedelta(minutes=5)).isoformat(),
        "expires_at": (START + timedelta(seconds=30)).isoformat(),
    }
    text = jobs("status")
    assert "  boss-2 (leader)  " in text
    assert text.count("(leader)") == 1
    assert text.rstrip().splitlines()[-1] == (
        "Leader: boss-2 (epoch 3, since 2026-01-05 11:55:00 UTC)."
    )


@pytest.mark.parametrize("expires_in", [0, -30])  # lapsing now; handed over (resigned)
def test_jobs_status_a_lapsed_leader_lease_marks_nobody(expires_in: int) -> None:
    register("lone", timedelta(seconds=10), ["default"])
    lead("lone", expires_at=START + timedelta(seconds=expires_in))

    document = jobs_json("status")
    assert [w["leads"] for w in document["workers"]] == [False]
    assert document["leader"] is None
    text = jobs("status")
    assert "(leader)" not in text
    assert text.rstrip().splitlines()[-1] == (
        "No leader yet: the rescuer, the recurring scheduler and pruning wait for one."
    )


def test_jobs_status_table_gives_times_to_the_second_with_the_zone(
    make_job: MakeJob, settings: Any
) -> None:
    settings.TIME_ZONE = "Europe/Paris"
    make_job(run_at=START - timedelta(minutes=2, seconds=3))
    lines = jobs("status").splitlines()
    assert lines[0] == "As of 2026-01-05 13:00:00 CET"
    assert lines[2].split() == [
        "queue",
        "waiting",
        "due",
        "scheduled",
        "retrying",
        "running",
        "succeeded",
        "dead_lettered",
        "cancelled",
        "oldest",
        "due",
        "served",
    ]
    assert lines[3].split()[:3] == ["default", "0", "1"]
    assert "2 min 3 s" in lines[3]
    assert "No live workers." in lines


def test_jobs_list_is_newest_first_and_filters(make_job: MakeJob) -> None:
    a = make_job(name="tests.ok")
    b = make_job(name="tests.ok", queue="emails")
    c = finished(make_job, JobStatus.DEAD_LETTERED, name="tests.fails", last_error="Boom")
    d = make_job(name="tests.fails", queue="emails")

    def ids(*args: str) -> list[int]:
        return [job["id"] for job in jobs_json("list", *args)["jobs"]]

    assert ids() == [d.pk, c.pk, b.pk, a.pk]
    assert ids("--status", "dead_lettered") == [c.pk]
    assert ids("--queue", "emails") == [d.pk, b.pk]
    assert ids("--name", "tests.fails") == [d.pk, c.pk]
    assert ids("--name", "tests.fails", "--queue", "default") == [c.pk]
    assert ids("--limit", "2") == [d.pk, c.pk]
    assert ids("--queue", "nowhere") == []
    assert jobs("list", "--queue", "nowhere") == "No jobs.\n"
    row = next(line for line in jobs("list").splitlines() if line.lstrip().startswith(str(c.pk)))
    assert row.split()[1:4] == ["tests.fails", "default", "dead_lettered"]
    assert "2026-01-05 12:00:00 UTC" in row
    assert row.endswith("Boom")


def test_jobs_list_shows_fifty_by_default(make_job: MakeJob) -> None:
    Job.objects.bulk_create(Job(name="tests.ok", run_at=START) for _ in range(55))
    listed = jobs_json("list")["jobs"]
    assert len(listed) == 50
    assert listed[0]["id"] == Job.objects.order_by("-id").first().pk  # type: ignore[union-attr]


def test_jobs_show_prints_the_job_and_its_attempts(make_job: MakeJob) -> None:
    job = finished(make_job, JobStatus.DEAD_LETTERED, attempt=2, attempts_used=2)
    for number, outcome in ((1, AttemptOutcome.LEASE_EXPIRED), (2, AttemptOutcome.FAILED)):
        Attempt.objects.create(
            job=job,
            number=number,
            owner=f"host:{number}:abc",
            started_at=START - timedelta(seconds=10 * number),
            finished_at=START - timedelta(seconds=10 * number - 4),
            outcome=outcome,
            error="ValueError: nope\nline two" if number == 2 else "",
        )
    document = jobs_json("show", str(job.pk))
    assert document["job"]["id"] == job.pk
    assert document["job"]["status"] == "dead_lettered"
    assert [(a["number"], a["outcome"]) for a in document["attempts"]] == [
        (1, "lease_expired"),
        (2, "failed"),
    ]
    text = jobs("show", str(job.pk))
    assert re.search(r"^status: +dead_lettered$", text, re.MULTILINE)
    assert re.search(r"^finished_at: +2026-01-05 12:00:00 UTC$", text, re.MULTILINE)
    attempt_two = text.splitlines()[-1].split()
    assert attempt_two[:3] == ["2", "failed", "host:2:abc"]
    assert attempt_two[-4:] == ["4", "s", "ValueError:", "nope…"]


def test_jobs_show_masks_secrets_in_the_payload(make_job: MakeJob) -> None:
    job = make_job(payload={"api_key": "sk-live-123", "user": 7})
    assert jobs_json("show", str(job.pk))["job"]["payload"] == {"api_key": "***", "user": 7}
    assert jobs_json("list")["jobs"][0]["payload"] == {"api_key": "***", "user": 7}
    assert "sk-live-123" not in jobs("show", str(job.pk))


def test_jobs_show_an_unknown_id_is_a_command_error(make_job: MakeJob) -> None:
    with pytest.raises(CommandError, match=r"^No job with id 999\.$"):
        jobs("show", "999")


@pytest.mark.parametrize(
    "args",
    [
        ("list", "--status", "bogus"),
        ("list", "--limit", "0"),
        ("list", "--limit", "many"),
        ("show", "abc"),
        ("show",),
        ("frobnicate",),
        (),
    ],
)
def test_jobs_bad_arguments_are_a_command_error(args: tuple[str, ...]) -> None:
    with pytest.raises(CommandError):
        jobs(*args)


def test_jobs_retry_reports_what_happened_to_each_id(make_job: MakeJob) -> None:
    dead = finished(make_job, JobStatus.DEAD_LETTERED, attempts_used=3)
    pending = make_job()
    out = StringIO()
    not_retried = rf"^Not retried: job {pending.pk}, 999\.$"
    with freeze_time(START), pytest.raises(CommandError, match=not_retried):
        call_command("jobs", "retry", str(dead.pk), str(pending.pk), "999", "--json", stdout=out)
    assert json.loads(out.getvalue())["results"] == [
        {"id": dead.pk, "result": "retried", "status": None, "dependents": 0},
        {"id": pending.pk, "result": "not_retryable", "status": "pending", "dependents": 0},
        {"id": 999, "result": "unknown", "status": None, "dependents": 0},
    ]
    dead.refresh_from_db()
    assert (dead.status, dead.attempts_used, dead.finished_at) == (JobStatus.PENDING, 0, None)


def test_jobs_retry_a_job_that_is_not_dead_lettered_fails_and_says_why(
    make_job: MakeJob,
) -> None:
    """As ``jobs cancel`` of a finished job does: a script sees that nothing was retried."""
    job = finished(make_job, JobStatus.SUCCEEDED)
    out = StringIO()
    with freeze_time(START), pytest.raises(CommandError, match=rf"^Not retried: job {job.pk}\.$"):
        call_command("jobs", "retry", str(job.pk), stdout=out)
    assert out.getvalue().splitlines()[1].split(maxsplit=1) == [
        str(job.pk),
        "not dead-lettered or cancelled (it is succeeded)",
    ]
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED


def test_jobs_retry_puts_a_cancelled_job_back(make_job: MakeJob) -> None:
    cancelled = finished(make_job, JobStatus.CANCELLED)
    assert jobs("retry", str(cancelled.pk)).splitlines()[1].split() == [
        str(cancelled.pk),
        "retried",
    ]
    cancelled.refresh_from_db()
    assert cancelled.status == JobStatus.PENDING


def test_jobs_retry_says_what_went_back_to_waiting_in_a_workflow() -> None:
    """As the admin's Retry does: the dependents a failure cancelled go back to waiting,
    and a job whose own dependency has not succeeded is retried into waiting."""
    from django_jobs import cancel_job, chain

    first, second, third = chain({"job": "tests.ok"}, {"job": "tests.ok"}, {"job": "tests.ok"})
    cancel_job(first.pk)  # cancels the two after it, in turn
    second_back = json.loads(jobs("retry", str(second.pk), "--json"))["results"]
    assert second_back == [{"id": second.pk, "result": "waiting", "status": None, "dependents": 1}]
    assert jobs("retry", str(first.pk)).splitlines()[1].split(maxsplit=1) == [
        str(first.pk),
        "retried",
    ]
    statuses = dict(Job.objects.values_list("id", "status"))
    assert [statuses[j.pk] for j in (first, second, third)] == ["pending", "waiting", "waiting"]
    cancel_job(first.pk)
    assert jobs("retry", str(first.pk)).splitlines()[1].split(maxsplit=1) == [
        str(first.pk),
        "retried; 2 dependent(s) back to waiting",
    ]


def test_jobs_retry_of_a_cancelled_job_refused_by_a_live_twin_says_refused(
    make_job: MakeJob,
) -> None:
    cancelled = finished(make_job, JobStatus.CANCELLED, unique_key="k")
    make_job(unique_key="k")
    out = StringIO()
    with pytest.raises(CommandError, match=rf"job {cancelled.pk}\."):
        call_command("jobs", "retry", str(cancelled.pk), stdout=out)
    assert "refused: a live job has the same unique_key" in out.getvalue()


def test_jobs_retry_refused_by_a_live_job_with_the_same_unique_key(make_job: MakeJob) -> None:
    dead = finished(make_job, JobStatus.DEAD_LETTERED, unique_key="k")
    make_job(unique_key="k")
    out = StringIO()
    with pytest.raises(CommandError, match=rf"job {dead.pk}\."):
        call_command("jobs", "retry", str(dead.pk), stdout=out)
    assert "refused: a live job has the same unique_key" in out.getvalue()
    dead.refresh_from_db()
    assert dead.status == JobStatus.DEAD_LETTERED


def test_jobs_retry_all_dead_lettered_of_one_queue(make_job: MakeJob) -> None:
    a = finished(make_job, JobStatus.DEAD_LETTERED)
    b = finished(make_job, JobStatus.DEAD_LETTERED, queue="emails")
    c = finished(make_job, JobStatus.DEAD_LETTERED, queue="emails")
    results = jobs_json("retry", "--all-dead-lettered", "--queue", "emails")["results"]
    assert [(r["id"], r["result"]) for r in results] == [(b.pk, "retried"), (c.pk, "retried")]
    assert Job.objects.get(pk=a.pk).status == JobStatus.DEAD_LETTERED
    assert [r["id"] for r in jobs_json("retry", "--all-dead-lettered")["results"]] == [a.pk]
    assert jobs("retry", "--all-dead-lettered") == "No dead-lettered jobs.\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("retry",), "Give job ids or --all-dead-lettered"),
        (("retry", "1", "--all-dead-lettered"), "Give job ids or --all-dead-lettered"),
        (("retry", "1", "--queue", "emails"), "--queue goes with --all-dead-lettered"),
    ],
)
def test_jobs_retry_needs_ids_or_all_dead_lettered(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        jobs(*args)


def manage_jobs(*args: str) -> subprocess.CompletedProcess[str]:
    return manage("jobs", *args)


@pytest.mark.django_db(transaction=True)
def test_jobs_process_exits_non_zero_on_an_unknown_id_without_a_traceback(
    make_job: MakeJob,
) -> None:
    job = finished(make_job, JobStatus.DEAD_LETTERED)
    shown = manage_jobs("show", "999")
    assert (shown.returncode, shown.stdout) == (1, "")
    assert shown.stderr.splitlines() == ["CommandError: No job with id 999."]
    retried = manage_jobs("retry", str(job.pk), "999", "--json")
    assert retried.returncode == 1
    assert [r["result"] for r in json.loads(retried.stdout)["results"]] == ["retried", "unknown"]
    assert retried.stderr.splitlines() == ["CommandError: Not retried: job 999."]
    listed = manage_jobs("list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["jobs"][0]["status"] == "pending"


@pytest.mark.django_db(transaction=True)
def test_jobs_process_takes_djangos_options_after_the_subcommand(make_job: MakeJob) -> None:
    job = make_job()
    settings_module = os.environ.get("DJANGO_SETTINGS_MODULE", "testproject.settings")
    for args in (
        ("status", "--settings", settings_module, "-v", "2"),
        ("list", "--json", "--traceback", "--no-color", "--verbosity=0"),
        ("show", "--skip-checks", "--pythonpath", ".", str(job.pk)),
    ):
        result = manage_jobs(*args)
        assert result.returncode == 0, (args, result.stderr)


@pytest.mark.parametrize(
    ("args", "verbosity", "traceback"),
    [
        (["status"], 1, False),
        (["status", "-v", "2"], 2, False),
        (["-v", "3", "list"], 3, False),
        (["-v", "3", "list", "--traceback", "-v", "0"], 0, True),
    ],
)
def test_jobs_djangos_options_after_the_subcommand_take_effect(
    args: list[str], verbosity: int, traceback: bool
) -> None:
    from django_jobs.management.commands.jobs import Command

    options = Command().create_parser("manage.py", "jobs").parse_args(args)
    assert (options.verbosity, options.traceback) == (verbosity, traceback)


def test_jobs_process_says_in_one_line_that_the_database_cannot_be_reached(tmp_path) -> None:
    unreachable = f"sqlite:///{tmp_path / 'no-such-directory' / 'jobs.sqlite3'}"
    result = manage("jobs", "status", "--skip-checks", url=unreachable)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "CommandError: The database answered OperationalError: unable to open database file"
    ]


@pytest.mark.django_db(transaction=True)
def test_jobs_process_rejects_a_bad_flag_with_usage(make_job: MakeJob) -> None:
    result = manage_jobs("list", "--status", "bogus")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "argument --status: invalid choice: 'bogus'" in result.stderr


def test_jobs_cancel_reports_what_happened_to_each_id(make_job: MakeJob) -> None:
    pending = make_job()
    running = make_job(status=JobStatus.RUNNING, lease_owner="w1", attempt=1, attempts_used=1)
    done = finished(make_job, JobStatus.SUCCEEDED)
    out = StringIO()
    with freeze_time(START), pytest.raises(CommandError, match=r"^Not cancelled: job \d+, 999\.$"):
        call_command(
            "jobs",
            "cancel",
            str(pending.pk),
            str(running.pk),
            str(done.pk),
            "999",
            "--json",
            stdout=out,
        )
    assert json.loads(out.getvalue())["results"] == [
        {"id": pending.pk, "result": "cancelled", "status": None},
        {"id": running.pk, "result": "requested", "status": None},
        {"id": done.pk, "result": "finished", "status": "succeeded"},
        {"id": 999, "result": "unknown", "status": None},
    ]
    statuses = dict(Job.objects.values_list("id", "status"))
    assert statuses[pending.pk] == JobStatus.CANCELLED
    assert statuses[running.pk] == JobStatus.RUNNING
    assert Job.objects.get(pk=running.pk).cancel_requested_at is not None


def test_jobs_cancel_table_says_a_running_job_stops_at_its_next_heartbeat(
    make_job: MakeJob,
) -> None:
    running = make_job(status=JobStatus.RUNNING, lease_owner="w1", attempt=1, attempts_used=1)
    assert jobs("cancel", str(running.pk)).splitlines()[1].split(maxsplit=1) == [
        str(running.pk),
        "running: asked to stop at its worker's next heartbeat",
    ]


# -- jobs prune ---------------------------------------------------------------------------


DAY = timedelta(days=1)


def aged(make_job: MakeJob, status: str, age: timedelta, attempts: int = 0) -> Job:
    """A job of ``status`` that finished ``age`` before START, with ``attempts`` attempts."""
    job = make_job(status=status, finished_at=START - age, attempts_used=attempts)
    for number in range(1, attempts + 1):
        Attempt.objects.create(job=job, number=number, owner="w", started_at=START - age)
    return job


def kept(*jobs: Job) -> set[int]:
    return set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("pk", flat=True))


@pytest.fixture
def expired(make_job: MakeJob) -> dict[str, Job]:
    """Jobs on either side of the default retentions (7 days, 30 for dead letters)."""
    return {
        "old_ok": aged(make_job, JobStatus.SUCCEEDED, 7 * DAY + HOUR, attempts=2),
        "new_ok": aged(make_job, JobStatus.SUCCEEDED, 7 * DAY - HOUR),
        "old_cancelled": aged(make_job, JobStatus.CANCELLED, 8 * DAY),
        "old_dead": aged(make_job, JobStatus.DEAD_LETTERED, 31 * DAY, attempts=3),
        "new_dead": aged(make_job, JobStatus.DEAD_LETTERED, 29 * DAY),
        "old_pending": make_job(run_at=START - 90 * DAY, created_at=START - 90 * DAY),
    }


def test_jobs_prune_deletes_expired_finished_jobs_with_their_attempts(
    expired: dict[str, Job],
) -> None:
    document = jobs_json("prune")
    assert [(s["status"], s["deleted"]) for s in document["statuses"]] == [
        ("succeeded", 1),
        ("dead_lettered", 1),
        ("cancelled", 1),
    ]
    assert document["statuses"][0]["older_than_seconds"] == 7 * 86400
    assert document["statuses"][0]["cutoff"] == (START - 7 * DAY).isoformat()
    assert (document["deleted"], document["dry_run"]) == (3, False)
    assert document["seconds"] >= 0
    assert kept(*expired.values()) == {
        expired[name].pk for name in ("new_ok", "new_dead", "old_pending")
    }
    assert Attempt.objects.count() == 0  # those of the two deleted jobs that had some
    assert jobs_json("prune")["deleted"] == 0  # nothing left to go


def test_jobs_prune_table_says_per_status_what_went_and_how_long_it_took(
    expired: dict[str, Job],
) -> None:
    lines = jobs("prune").splitlines()
    assert lines[:4] == [
        "status         older than  finished before          deleted",
        "succeeded      7d          2025-12-29 12:00:00 UTC        1",
        "dead_lettered  30d         2025-12-06 12:00:00 UTC        1",
        "cancelled      7d          2025-12-29 12:00:00 UTC        1",
    ]
    assert re.fullmatch(r"Deleted 3 finished job\(s\) \(\d+\.\d{3} s\)\.", lines[5])


def test_jobs_prune_dry_run_counts_per_status_and_deletes_nothing(
    expired: dict[str, Job],
) -> None:
    document = jobs_json("prune", "--dry-run")
    assert [(s["status"], s["would_delete"]) for s in document["statuses"]] == [
        ("succeeded", 1),
        ("dead_lettered", 1),
        ("cancelled", 1),
    ]
    assert (document["would_delete"], document["dry_run"]) == (3, True)
    assert "deleted" not in document
    assert kept(*expired.values()) == {job.pk for job in expired.values()}
    assert Attempt.objects.count() == 5
    assert (
        jobs("prune", "--dry-run")
        .splitlines()[-1]
        .startswith("Would delete 3 finished job(s); dry run, nothing deleted (")
    )


def test_jobs_prune_status_limits_the_run(expired: dict[str, Job]) -> None:
    document = jobs_json("prune", "--status", "dead_lettered")
    assert [(s["status"], s["deleted"]) for s in document["statuses"]] == [("dead_lettered", 1)]
    assert not kept(expired["old_dead"])
    assert kept(expired["old_ok"], expired["old_cancelled"])
    both = jobs_json("prune", "--status", "succeeded", "--status", "cancelled", "--dry-run")
    assert [s["status"] for s in both["statuses"]] == ["succeeded", "cancelled"]


def test_jobs_prune_older_than_overrides_the_retention_for_this_run(
    expired: dict[str, Job],
) -> None:
    document = jobs_json("prune", "--older-than", "30d")
    assert [(s["status"], s["deleted"]) for s in document["statuses"]] == [
        ("succeeded", 0),
        ("dead_lettered", 1),
        ("cancelled", 0),
    ]
    assert {s["older_than_seconds"] for s in document["statuses"]} == {30 * 86400}
    assert kept(expired["old_ok"], expired["old_cancelled"], expired["new_dead"]) == {
        expired["old_ok"].pk,
        expired["old_cancelled"].pk,
        expired["new_dead"].pk,
    }
    assert jobs_json("prune", "--older-than", "6d23h")["deleted"] == 3
    assert kept(expired["old_pending"])  # pending and running jobs are never pruned


@override_settings(DJANGO_JOBS={"RETENTION": {"dead_lettered": None}})
def test_jobs_prune_leaves_a_status_kept_forever_unless_older_than_is_given(
    expired: dict[str, Job],
) -> None:
    document = jobs_json("prune", "--status", "dead_lettered")
    assert document["statuses"] == [
        {"status": "dead_lettered", "older_than_seconds": None, "cutoff": None, "deleted": 0}
    ]
    assert "dead_lettered  kept forever  -" in jobs("prune", "--dry-run")
    assert kept(expired["old_dead"])
    assert jobs_json("prune", "--status", "dead_lettered", "--older-than", "30d")["deleted"] == 1
    assert not kept(expired["old_dead"])


def test_jobs_prune_works_in_bounded_batches(make_job: MakeJob) -> None:
    old = [aged(make_job, JobStatus.SUCCEEDED, 8 * DAY) for _ in range(5)]
    table = connection.ops.quote_name(Job._meta.db_table)
    picks: list[str] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if f"SELECT {table}." in sql and "ORDER BY" in sql and "LIMIT" in sql.upper():
            picks.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        [result] = prune_statuses(
            START,
            using="default",
            retention={"succeeded": 7 * DAY},
            statuses=["succeeded"],
            batch=2,
        )
    assert result.count == 5 and not kept(*old)
    assert len(picks) == 3  # 2 + 2 + 1: one short transaction each


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("7d", 7 * 86400),
        ("12h", 12 * 3600),
        ("30m", 1800),
        ("45s", 45),
        ("2w", 14 * 86400),
        ("1d12h", 36 * 3600),
        (" 7D ", 7 * 86400),
    ],
)
def test_jobs_prune_durations_read_as_their_units(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("7", "not a duration: '7'; give whole numbers with a unit (w, d, h, m, s)"),
        ("7 days", "not a duration: '7 days'"),
        ("1.5h", "not a duration: '1.5h'"),
        ("d", "not a duration: 'd'"),
        ("", "not a duration: ''"),
        ("-1d", "not a duration: '-1d'"),
        ("0d", "a duration must be more than zero, got '0d'"),
        ("0h0m", "a duration must be more than zero, got '0h0m'"),
        ("9999999999w", "duration too long: '9999999999w'"),
    ],
)
def test_jobs_prune_bad_duration_is_a_clear_error(
    expired: dict[str, Job], text: str, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_duration(text)
    with pytest.raises(CommandError, match=re.escape(message)):
        jobs("prune", f"--older-than={text}")
    assert kept(*expired.values()) == {job.pk for job in expired.values()}


@pytest.mark.parametrize(
    "args",
    [("prune", "--status", "pending"), ("prune", "--status", "running"), ("prune", "--older-than")],
)
def test_jobs_prune_bad_flags_are_a_command_error(args: tuple[str, ...]) -> None:
    with pytest.raises(CommandError):
        jobs(*args)


def test_jobs_prune_a_duration_that_reaches_before_year_one_deletes_nothing(
    expired: dict[str, Job],
) -> None:
    document = jobs_json("prune", "--older-than", "110000w")  # 770,000 days before 2026
    assert document["deleted"] == 0
    assert document["statuses"][0]["cutoff"] == "0001-01-01T00:00:00+00:00"
    assert kept(*expired.values()) == {job.pk for job in expired.values()}


@pytest.mark.django_db(transaction=True)
def test_jobs_process_prune_rejects_a_bad_duration_with_usage(make_job: MakeJob) -> None:
    job = aged(make_job, JobStatus.SUCCEEDED, 400 * DAY)
    result = manage_jobs("prune", "--older-than", "7 days")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "argument --older-than: not a duration: '7 days'" in result.stderr
    assert kept(job)
    done = manage_jobs("prune", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["deleted"] == 1 and not kept(job)


def test_jobs_status_lists_a_supervisor_once_with_its_processes_under_it(
    make_job: MakeJob,
) -> None:
    register("lone", timedelta(seconds=1), ["default"])
    register("sup", timedelta(seconds=1), ["default"])
    for child in ("sup-a", "sup-b"):
        register(child, timedelta(seconds=2), ["default"])
    WorkerProcess.objects.filter(id__in=["sup-a", "sup-b"]).update(supervisor="sup")
    for pid, worker_id in enumerate(["lone", "sup", "sup-a", "sup-b"]):  # listed by host, pid
        WorkerProcess.objects.filter(id=worker_id).update(pid=pid)
    for owner in ("sup-a", "sup-a", "sup-b", "lone"):
        make_job(status=JobStatus.RUNNING, lease_owner=owner, lease_expires_at=START + HOUR)
    lines = jobs("status").splitlines()
    start = lines.index(next(x for x in lines if "worker" in x))
    table = lines[start : lines.index("", start)]  # the leader's line follows it
    rows = [line.split() for line in table]
    assert [(row[0], row[-1]) for row in rows[1:]] == [
        ("lone", "1"),
        ("sup", "3"),  # its processes' running jobs
        ("sup-a", "2"),
        ("sup-b", "1"),
    ]
    assert rows[2][1] == "(2" and rows[2][2] == "processes)"
    assert table[-2].startswith("  sup-a") and table[-1].startswith("  sup-b")
    document = jobs_json("status")
    assert {w["id"]: w["supervisor"] for w in document["workers"]} == {
        "lone": None,
        "sup": None,
        "sup-a": "sup",
        "sup-b": "sup",
    }
