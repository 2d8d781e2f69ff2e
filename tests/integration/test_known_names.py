"""A worker claims only the jobs whose names it knows; a job of another name waits, pending,
and the dashboard and ``jobs status`` say for which name."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from freezegun import freeze_time

from django_jobs import job, stats
from django_jobs.models import Job, JobStatus, WorkerProcess
from django_jobs.registry import known_names, unregister
from tests.conftest import START, jobs, jobs_json

pytestmark = pytest.mark.django_db

MakeJob = Callable[..., Job]
MINUTE = timedelta(minutes=1)


@pytest.fixture
def late_name() -> Iterator[str]:
    """A name registered only once the test says so (the end of a deploy), then removed."""
    yield "tests.registered_late"
    unregister("tests.registered_late")


def register_late(name: str) -> None:
    @job(name)
    def handler(ctx: Any, payload: Any) -> str:
        return "ran"


def register(worker_id: str, queues: list[str], names: list[str] | None, **fields: Any) -> None:
    WorkerProcess.objects.create(
        id=worker_id,
        host="host",
        pid=1,
        queues=queues,
        started_at=START - timedelta(hours=1),
        last_heartbeat_at=START - timedelta(seconds=10),
        names=names,
        **fields,
    )


# -- the worker ------------------------------------------------------------------------


def test_worker_ticks_leave_a_job_of_an_unknown_name_pending_without_an_attempt(
    worker, make_job: MakeJob, clock
) -> None:
    waiting = make_job(name="tests.from_the_next_deploy", priority=5)
    known = [make_job() for _ in range(3)]
    w = worker(queues={"default": 2})
    for _ in range(4):
        w.run_once()
        clock.advance(60)
    waiting.refresh_from_db()
    assert (waiting.status, waiting.attempts_used, waiting.attempt) == (JobStatus.PENDING, 0, 0)
    assert waiting.last_error == ""
    assert {j.status for j in Job.objects.filter(pk__in=[k.pk for k in known])} == {
        JobStatus.SUCCEEDED
    }


def test_worker_claims_a_name_registered_after_it_started(
    worker, make_job: MakeJob, late_name: str
) -> None:
    waiting = make_job(name=late_name)
    w = worker()
    assert w.run_once().claimed == 0
    register_late(late_name)  # the registry grew: the next claim asks for the new name too
    result = w.run_once()
    assert (result.claimed, result.succeeded) == (1, 1)
    assert Job.objects.get(pk=waiting.pk).result == "ran"


def test_worker_row_keeps_the_names_it_knows_and_their_growth(
    worker, clock, late_name: str
) -> None:
    w = worker()
    w.maintainer.register(clock.now())
    row = WorkerProcess.objects.get(id=w.owner)
    assert row.names == list(known_names())
    assert "tests.ok" in row.names and late_name not in row.names
    assert any(name.startswith("django_jobs.") for name in row.names)  # the package's own run
    register_late(late_name)
    w.maintainer.refresh_registration(clock.now())
    assert late_name in WorkerProcess.objects.get(id=w.owner).names


def test_known_names_are_read_again_only_when_the_registry_changed(late_name: str) -> None:
    first = known_names()
    assert known_names() is first  # the same tuple: the driver binds it as it is
    register_late(late_name)
    assert late_name in known_names() and known_names() is not first


# -- what the dashboard and `jobs status` say -------------------------------------------


def waiting_jobs(make_job: MakeJob) -> None:
    make_job(name="tests.new_report", run_at=START - 5 * MINUTE)
    make_job(name="tests.new_report", run_at=START - MINUTE)
    make_job(name="tests.new_report", run_at=START + MINUTE)  # not due: not waiting yet
    make_job(run_at=START - 10 * MINUTE)  # known


def test_waiting_for_names_lists_due_jobs_no_live_worker_of_their_queue_knows(
    make_job: MakeJob,
) -> None:
    waiting_jobs(make_job)
    make_job(name="tests.emailer", queue="emails", run_at=START - MINUTE)
    register("old", ["default"], ["tests.ok"])
    register("other", ["emails"], ["tests.new_report", "tests.emailer"])
    [waiting] = stats.waiting_for_names(now=START)
    assert (waiting.queue, waiting.name, waiting.count) == ("default", "tests.new_report", 2)
    assert waiting.age(START) == 5 * MINUTE
    register("new", ["default"], ["tests.ok", "tests.new_report"])  # the deploy finished
    assert stats.waiting_for_names(now=START) == []


def test_waiting_for_names_says_nothing_without_a_live_worker_or_with_one_of_any_name(
    make_job: MakeJob,
) -> None:
    waiting_jobs(make_job)
    assert stats.waiting_for_names(now=START) == []  # no worker: the queue is unserved
    register("boss", ["default"], None, process_count=2)  # a supervisor runs no job
    register("child", ["default"], ["tests.ok"], supervisor="boss")
    assert [w.name for w in stats.waiting_for_names(now=START)] == ["tests.new_report"]
    register("older", ["default"], None)  # from before the names: it claims every name
    assert stats.waiting_for_names(now=START) == []


def test_jobs_status_says_which_jobs_wait_for_a_worker_that_knows_their_name(
    make_job: MakeJob,
) -> None:
    waiting_jobs(make_job)
    register("old", ["default"], ["tests.ok"])
    assert (
        "Queue default: 2 jobs waiting for a worker that knows `tests.new_report`,"
        " the oldest for 5 min." in jobs("status")
    )
    [waiting] = jobs_json("status")["waiting"]
    assert waiting["name"] == "tests.new_report" and waiting["count"] == 2
    assert waiting["oldest_due_age_seconds"] == 300


def test_jobs_status_says_nothing_of_names_without_a_live_worker(make_job: MakeJob) -> None:
    waiting_jobs(make_job)
    assert "waiting for a worker" not in jobs("status")
    assert jobs_json("status")["waiting"] == []


def test_dashboard_flags_the_jobs_that_wait_for_a_worker_that_knows_their_name(
    admin_client: Client, make_job: MakeJob
) -> None:
    waiting_jobs(make_job)
    make_job(name="tests.other_new", run_at=START - MINUTE)
    register("old", ["default"], ["tests.ok"])
    with freeze_time(START):
        html = admin_client.get(reverse("admin:django_jobs_dashboard")).content.decode()
    flags = re.findall(r'<li class="warning jobs-flag-waiting"[^>]*>(.*?)</li>', html)
    assert flags == [
        "Queue <strong>default</strong>: 2 jobs waiting for a worker that knows"
        " <code>tests.new_report</code>, the oldest for 5 min.",
        "Queue <strong>default</strong>: 1 job waiting for a worker that knows"
        " <code>tests.other_new</code>, for 1 min.",
    ]


def test_a_lanes_claim_looks_among_every_name_the_worker_knows_and_a_plain_claim_does_not(
    worker: Callable[..., Any],
) -> None:
    """The driver bounds a lane's read to a window of the worker's names (``among``): the
    claimer says which claims are a lane's."""
    claimer = worker().claimer
    plain = claimer.request("default", START, 1)
    lane = claimer.request("default", START, 1, names=("tests.ok",))
    assert (plain.names, plain.among) == (known_names(), None)
    assert (lane.names, lane.among) == (("tests.ok",), known_names())
