"""The admin's dashboard and the jobs summary on its index, through the test client."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin import AdminSite
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from freezegun import freeze_time

from django_jobs import stats
from django_jobs.admin.dashboard import INDEX_TEMPLATE, URL_NAME, install
from django_jobs.models import Attempt, AttemptOutcome, Job, JobStatus, Leader, WorkerProcess
from tests.conftest import START
from tests.support.leaders import lease_of

pytestmark = pytest.mark.django_db

DASHBOARD = "admin:django_jobs_dashboard"
INDEX = "admin:index"
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
MakeJob = Callable[..., Job]


@pytest.fixture(autouse=True)
def frozen() -> Iterator[None]:
    """The pages read ``timezone.now()``: START, where the rows are made."""
    with freeze_time(START):
        yield


def page(client: Client, name: str = DASHBOARD, **kwargs: Any) -> str:
    response = client.get(reverse(name, kwargs=kwargs or None))
    assert response.status_code == 200
    return response.content.decode()


def queue_row(html: str, queue: str) -> dict[str, str]:
    """The dashboard's counts of one queue, by column."""
    match = re.search(rf'<tr class="jobs-queue" data-queue="{queue}">(.*?)</tr>', html, re.S)
    assert match, f"no row for queue {queue!r}"
    cells = re.findall(r'<td class="count" data-count="(\w+)">([^<]*)</td>', match.group(1))
    return dict(cells)


def bars(html: str, queue: str) -> list[tuple[str, str, str, str]]:
    """(series, count, height, title) of each bar in ``queue``'s chart."""
    figure = re.search(
        rf'<figure class="jobs-chart-figure" data-queue="{queue}">(.*?)</figure>', html, re.S
    )
    assert figure, f"no chart for queue {queue!r}"
    return re.findall(
        r'<rect class="bar bar-\w+" data-series="(\w+)" data-count="(\d+)" data-minute="[^"]+"'
        r' x="\d+" y="[\d.]+" width="\d+" height="([\d.]+)"><title>([^<]+)</title></rect>',
        figure.group(1),
    )


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


def attempt(job: Job, outcome: str, finished_at: Any, number: int = 1) -> Attempt:
    return Attempt.objects.create(
        job=job,
        number=number,
        owner="w",
        started_at=finished_at - timedelta(seconds=1),
        finished_at=finished_at,
        outcome=outcome,
    )


def lead(owner: str, expires_at: Any = None) -> Leader:
    return lease_of(owner, START, expires_at)


def finished_job(make_job: MakeJob, status: str, finished_at: Any, **overrides: Any) -> Job:
    values = {"status": status, "finished_at": finished_at, "attempt": 1, "attempts_used": 1}
    return make_job(**{**values, **overrides})


# Counts and the oldest due job


def make_mixed_queue(make_job: MakeJob) -> None:
    make_job(run_at=START - timedelta(seconds=90))  # due, the oldest
    make_job(run_at=START)  # due
    make_job(run_at=START - timedelta(seconds=10), attempts_used=1)  # due after its backoff
    make_job(run_at=START + HOUR)  # scheduled
    make_job(run_at=START + HOUR, attempts_used=1)  # retrying
    make_job(run_at=START + HOUR, attempts_used=2)  # retrying
    make_job(status=JobStatus.RUNNING, lease_owner="w", lease_expires_at=START + HOUR)
    finished_job(make_job, JobStatus.SUCCEEDED, START - 2 * HOUR)
    finished_job(make_job, JobStatus.SUCCEEDED, START - 2 * HOUR)
    finished_job(make_job, JobStatus.DEAD_LETTERED, START - 2 * HOUR)
    finished_job(make_job, JobStatus.CANCELLED, START - 2 * HOUR, queue="emails")
    make_job(queue="emails", run_at=START + HOUR)  # scheduled: nothing is due in emails


def test_overview_splits_pending_into_due_scheduled_and_retrying(make_job: MakeJob) -> None:
    make_mixed_queue(make_job)
    seen = {s.queue: s for s in stats.overview(now=START).queues}
    default = seen["default"]
    assert (default.due, default.scheduled, default.retrying, default.running) == (3, 1, 2, 1)
    assert (default.succeeded, default.dead_lettered, default.cancelled) == (2, 1, 0)
    assert default.oldest_due_age(START) == timedelta(seconds=90)
    assert (seen["emails"].cancelled, seen["emails"].oldest_due_at) == (1, None)


def test_dashboard_shows_counts_by_status_and_the_oldest_due_age(
    admin_client: Client, make_job: MakeJob
) -> None:
    make_mixed_queue(make_job)
    make_job(status=JobStatus.WAITING)  # for the jobs it depends on
    html = page(admin_client)
    assert queue_row(html, "default") == {
        "waiting": "1",
        "due": "3",
        "scheduled": "1",
        "retrying": "2",
        "running": "1",
        "succeeded": "2",
        "dead_lettered": "1",
        "cancelled": "0",
    }
    assert queue_row(html, "emails")["cancelled"] == "1"
    assert re.search(
        r'data-count="oldest_due">1 min 30 s <span class="quiet">'
        r"\(due 2026-01-05 11:58:30 UTC\)",
        html,
    )


def test_dashboard_gives_times_to_the_second_in_the_active_zone(
    admin_client: Client, make_job: MakeJob, settings: Any
) -> None:
    settings.TIME_ZONE = "Europe/Paris"
    make_job(run_at=START - timedelta(minutes=2, seconds=3))
    html = page(admin_client)
    assert "As of 2026-01-05 13:00:00 CET" in html
    assert "(due 2026-01-05 12:57:57 CET)" in html


# The last hour's chart


def test_chart_counts_attempts_ended_per_minute_succeeded_above_and_failed_below(
    admin_client: Client, make_job: MakeJob, settings: Any
) -> None:
    # Two queues, both with attempts: no chart of the page is empty.
    queues = {"default": {"workers": 2}, "emails": {"workers": 1}}
    settings.DJANGO_JOBS = {**settings.DJANGO_JOBS, "QUEUES": queues}
    at_57, at_59 = START - 3 * MINUTE, START - MINUTE
    for _ in range(4):  # four jobs succeeded in the minute 11:57
        attempt(finished_job(make_job, JobStatus.SUCCEEDED, at_57), AttemptOutcome.SUCCEEDED, at_57)
    attempt(finished_job(make_job, JobStatus.SUCCEEDED, at_59), AttemptOutcome.SUCCEEDED, at_59)
    # Failed attempts in 11:59: one retried (the job waits out its backoff), one that
    # dead-lettered its job, one timed out, one whose lease expired.
    attempt(make_job(run_at=START + HOUR, attempt=1, attempts_used=1), AttemptOutcome.FAILED, at_59)
    attempt(finished_job(make_job, JobStatus.DEAD_LETTERED, at_59), AttemptOutcome.FAILED, at_59)
    attempt(
        make_job(run_at=START + HOUR, attempt=1, attempts_used=1), AttemptOutcome.TIMED_OUT, at_59
    )
    attempt(make_job(run_at=START, attempt=1, attempts_used=1), AttemptOutcome.LEASE_EXPIRED, at_59)
    # Not counted: a released attempt, a cancelled one, one that ended before the hour.
    attempt(make_job(attempt=1), AttemptOutcome.RELEASED, at_59)
    attempt(finished_job(make_job, JobStatus.CANCELLED, at_59), AttemptOutcome.CANCELLED, at_59)
    old = START - HOUR
    attempt(finished_job(make_job, JobStatus.SUCCEEDED, old), AttemptOutcome.SUCCEEDED, old)
    attempt(make_job(queue="emails", attempt=1, attempts_used=1), AttemptOutcome.FAILED, at_57)
    # Running again after a failed attempt: the failure counts.
    running = make_job(status=JobStatus.RUNNING, queue="emails", attempt=2, lease_owner="w")
    attempt(running, AttemptOutcome.FAILED, at_57)

    minutes = stats.overview(now=START).throughput["default"]
    assert len(minutes) == 60
    assert (minutes[0].start, minutes[-1].start) == (START - 59 * MINUTE, START)
    assert [(m.start, m.finished, m.failed) for m in minutes if m.finished or m.failed] == [
        (at_57, 4, 0),
        (at_59, 1, 4),
    ]
    html = page(admin_client)
    assert bars(html, "default") == [
        ("succeeded", "4", "40.0", "2026-01-05 11:57:00 UTC: 4 succeeded"),
        ("succeeded", "1", "10.0", "2026-01-05 11:59:00 UTC: 1 succeeded"),
        ("failed", "4", "40.0", "2026-01-05 11:59:00 UTC: 4 failed"),
    ]
    assert bars(html, "emails") == [("failed", "2", "40.0", "2026-01-05 11:57:00 UTC: 2 failed")]
    assert "No attempt ended in the last hour." not in html


def test_chart_counts_each_failed_attempt_of_a_job_that_then_succeeded(
    admin_client: Client, make_job: MakeJob
) -> None:
    job = finished_job(make_job, JobStatus.SUCCEEDED, START, attempt=3, attempts_used=3)
    attempt(job, AttemptOutcome.FAILED, START - 2 * MINUTE, number=1)
    attempt(job, AttemptOutcome.FAILED, START - 2 * MINUTE, number=2)
    attempt(job, AttemptOutcome.SUCCEEDED, START, number=3)
    assert bars(page(admin_client), "default") == [
        ("failed", "2", "40.0", "2026-01-05 11:58:00 UTC: 2 failed"),
        ("succeeded", "1", "20.0", "2026-01-05 12:00:00 UTC: 1 succeeded"),
    ]


# The flags


def test_dashboard_flags_stale_workers_even_past_a_lease_and_unserved_queues(
    admin_client: Client, make_job: MakeJob
) -> None:
    # LEASE_SECONDS is 300: a beat every 100 s, stale after 200 s.
    register("fresh", timedelta(seconds=150), ["default"])
    register("late", timedelta(seconds=201), ["emails"])
    register("gone", timedelta(seconds=900), ["emails"])  # older than a lease, not swept yet
    make_job(status=JobStatus.RUNNING, lease_owner="late", lease_expires_at=START + HOUR)
    make_job(run_at=START - MINUTE)
    make_job(queue="emails", run_at=START - timedelta(minutes=5))

    seen = stats.overview(now=START)
    assert [w.id for w in seen.workers] == ["fresh"]
    assert sorted(w.id for w in seen.stale_workers) == ["gone", "late"]
    assert [s.queue for s in seen.unserved_queues] == ["emails"]
    html = page(admin_client)
    unserved = re.findall(r'<li class="error jobs-flag-unserved">(.*?)</li>', html)
    assert unserved == [
        "No live worker serves queue <strong>emails</strong>: 1 job due, the oldest waiting 5 min."
    ]
    stale = re.findall(
        r'<li class="warning jobs-flag-stale">Stale worker <strong>(\w+)</strong>.*?(\d+) running',
        html,
    )
    assert sorted(stale) == [("gone", "0"), ("late", "1")]
    assert "last heartbeat 2026-01-05 11:56:39 UTC, 3 min 21 s ago" in html


def test_a_supervisor_serves_its_queues_only_through_its_worker_processes(
    admin_client: Client, make_job: MakeJob
) -> None:
    # runjobs --processes 2 whose children have died and wait to be started again.
    register("boss", timedelta(seconds=10), ["default"], process_count=2)
    make_job(run_at=START - MINUTE)
    assert [s.queue for s in stats.overview(now=START).unserved_queues] == ["default"]
    register("boss-child", timedelta(seconds=10), ["default"], supervisor="boss")
    assert stats.overview(now=START).unserved_queues == []


def test_dashboard_lists_a_supervisors_processes_under_it_with_their_running_jobs(
    admin_client: Client, make_job: MakeJob
) -> None:
    register("a-lone", timedelta(seconds=10), ["default"])
    register("boss", timedelta(seconds=10), ["default"], process_count=2)
    for name in ("child-1", "child-2"):
        register(name, timedelta(seconds=10), ["default"], supervisor="boss")
        make_job(status=JobStatus.RUNNING, lease_owner=name, lease_expires_at=START + HOUR)
    seen = stats.overview(now=START)
    assert [(w.id, w.running) for w in seen.workers] == [
        ("a-lone", 0),
        ("boss", 2),
        ("child-1", 1),
        ("child-2", 1),
    ]
    rows = re.findall(
        r'<tr class="jobs-worker( jobs-child)?"><th scope="row">(.*?)</th>.*?'
        r'<td class="count">(\d+)</td>',
        page(admin_client),
    )
    assert rows == [
        ("", "a-lone", "0"),
        ("", "boss (2 processes)", "2"),
        (" jobs-child", "↳ child-1", "1"),
        (" jobs-child", "↳ child-2", "1"),
    ]


# The leader


LEADER_BADGE = (
    ' <strong class="jobs-leader" title="the leader since 2026-01-05 11:55:00 UTC (epoch 3)">'
    "leader</strong>"
)


def worker_rows(html: str) -> list[str]:
    return re.findall(r'<tr class="jobs-worker[^"]*"><th scope="row">(.*?)</th>', html)


def test_dashboard_says_which_process_leads_since_when_and_marks_its_row(
    admin_client: Client,
) -> None:
    register("a-lone", timedelta(seconds=10), ["default"])
    register("boss", timedelta(seconds=10), ["default"], process_count=1)
    register("boss-child", timedelta(seconds=10), ["default"], supervisor="boss")
    lead("boss-child")

    seen = stats.overview(now=START)
    assert seen.leader == stats.LeaderInfo(
        owner="boss-child",
        epoch=3,
        elected_at=START - timedelta(minutes=5),
        expires_at=START + timedelta(seconds=30),
    )
    assert [(w.id, w.leads) for w in seen.workers] == [
        ("a-lone", False),
        ("boss", False),
        ("boss-child", True),
    ]
    html = page(admin_client)
    assert worker_rows(html) == ["a-lone", "boss (1 process)", "↳ boss-child" + LEADER_BADGE]
    assert (
        '<p id="jobs-leader">Leader: <strong>boss-child</strong> since 2026-01-05 11:55:00 UTC'
        " (epoch 3): it takes back expired leases, fires the recurring schedules and prunes"
        " finished jobs for every worker.</p>"
    ) in html
    assert "jobs-flag-leaderless" not in html


@pytest.mark.parametrize("expires_in", [0, -30])  # lapsing now; handed over (resigned)
def test_dashboard_and_summary_flag_live_workers_without_a_live_leader_lease(
    admin_client: Client, expires_in: int
) -> None:
    register("fresh", timedelta(seconds=10), ["default"])
    lead("fresh", expires_at=START + timedelta(seconds=expires_in))

    seen = stats.overview(now=START)
    assert seen.leader is None
    assert seen.leaderless
    assert [w.leads for w in seen.workers] == [False]
    flag = (
        '<li class="warning jobs-flag-leaderless">No leader: no worker process holds the'
        " leader lease, so the rescuer, the recurring scheduler and pruning wait for one to"
        " take it.</li>"
    )
    html = page(admin_client)
    assert flag in html
    assert worker_rows(html) == ["fresh"]
    assert 'id="jobs-leader"' not in html
    index = page(admin_client, INDEX)
    assert flag in index[index.index('id="django-jobs-summary"') :]


def test_dashboard_does_not_flag_a_missing_leader_without_live_workers(
    admin_client: Client,
) -> None:
    register("gone", timedelta(seconds=900), ["default"])  # stale: flagged as such
    html = page(admin_client)
    assert "jobs-flag-stale" in html
    assert "jobs-flag-leaderless" not in html
    assert stats.overview(now=START).leaderless is False


def test_queue_without_due_jobs_is_not_flagged_unserved(
    admin_client: Client, make_job: MakeJob
) -> None:
    make_job(queue="emails", run_at=START + HOUR)  # scheduled, not due
    assert "jobs-flag-unserved" not in page(admin_client)


# The index summary, links and permissions


def test_index_summary_shows_the_queues_the_flags_and_a_link_to_the_dashboard(
    admin_client: Client, make_job: MakeJob
) -> None:
    register("late", timedelta(seconds=250), ["emails"])
    make_job(queue="emails", run_at=START - timedelta(seconds=42))
    make_job(queue="emails", status=JobStatus.WAITING)  # for the jobs it depends on
    make_job(run_at=START + HOUR, attempts_used=1)
    for html in (
        page(admin_client, INDEX),
        page(admin_client, "admin:app_list", app_label="django_jobs"),
    ):
        summary = html[html.index('id="django-jobs-summary"') :]
        assert f'<a href="{reverse(DASHBOARD)}"' in summary
        emails = re.search(r'data-queue="emails">(.*?)</tr>', summary, re.S)
        assert emails
        cells = re.findall(r"<td[^>]*>(.*?)</td>", emails.group(1))
        assert cells == [
            "1",
            "1",
            "0",
            "0",
            "0",
            "0",
            "42 s",
            '<span class="jobs-unserved">NO WORKER</span>',
        ]
        assert "jobs-flag-stale" in summary
        assert "No live worker serves queue <strong>emails</strong>" in summary


def test_other_apps_index_pages_have_no_summary(admin_client: Client) -> None:
    assert "django-jobs-summary" not in page(admin_client, "admin:app_list", app_label="auth")


def test_dashboard_and_summary_need_the_view_permission_on_jobs(
    staff_client: Callable[..., Client], make_job: MakeJob
) -> None:
    make_job()
    client = staff_client("view_workerprocess")
    assert client.get(reverse(DASHBOARD)).status_code == 403
    index = page(client, INDEX)
    assert "django-jobs-summary" not in index
    assert reverse(DASHBOARD) not in index

    client.logout()
    viewer = staff_client("view_job")
    assert viewer.get(reverse(DASHBOARD)).status_code == 200
    assert "django-jobs-summary" in page(viewer, INDEX)


def test_dashboard_sends_anonymous_users_to_the_login_page(client: Client) -> None:
    response = client.get(reverse(DASHBOARD))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_install_keeps_a_project_index_template_and_adds_the_url_once() -> None:
    own = AdminSite(name="own")
    own.index_template = "project/index.html"
    install(own)
    install(own)
    assert own.index_template == "project/index.html"
    names = [getattr(pattern, "name", None) for pattern in own.get_urls()]
    assert names.count(URL_NAME) == 1
    plain = AdminSite(name="plain")
    install(plain)
    assert plain.index_template == INDEX_TEMPLATE


def test_dashboard_url_is_the_documented_one() -> None:
    assert reverse(DASHBOARD) == "/admin/django_jobs/dashboard/"


# What it costs


def fill(make_job: MakeJob, per_queue: int) -> None:
    for queue in ("default", "emails", "reports"):
        register(f"w-{queue}-{per_queue}", timedelta(seconds=10), [queue])
        for i in range(per_queue):
            make_job(queue=queue, run_at=START - i * MINUTE)
            make_job(status=JobStatus.RUNNING, queue=queue, lease_owner=f"w-{queue}-{per_queue}")
            done = finished_job(make_job, JobStatus.SUCCEEDED, START - i * MINUTE, queue=queue)
            attempt(done, AttemptOutcome.SUCCEEDED, START - i * MINUTE)


def count_queries(client: Client, name: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        page(client, name)
    return len(queries)


@pytest.mark.parametrize("name", [DASHBOARD, INDEX])
def test_pages_read_a_fixed_number_of_queries_whatever_the_number_of_jobs(
    admin_client: Client, make_job: MakeJob, name: str, django_assert_max_num_queries: Any
) -> None:
    fill(make_job, 1)
    few = count_queries(admin_client, name)
    fill(make_job, 20)
    assert count_queries(admin_client, name) == few
    # The session and user, then waiting, pending, running, the paused queues, finished (and
    # on PostgreSQL the estimate's EXPLAIN), the workers, their running jobs, the leader lease
    # and, on the dashboard, the chart; on the index, the savepoint that guards the summary
    # inside the test's transaction. The dashboard also reads the jobs tables' health: up
    # to three reads (PostgreSQL), in a savepoint inside the test's transaction.
    with django_assert_max_num_queries(14 if name == INDEX else 19):
        page(admin_client, name)


def test_finished_counts_are_estimates_on_postgresql_past_the_switch(
    admin_client: Client, make_job: MakeJob, monkeypatch: pytest.MonkeyPatch
) -> None:
    for status in (JobStatus.SUCCEEDED, JobStatus.DEAD_LETTERED):
        finished_job(make_job, status, START)
    assert stats.overview(now=START).finished_estimated is False  # small: exact
    monkeypatch.setattr(stats, "EXACT_FINISHED_UP_TO", 0)
    seen = stats.overview(now=START)
    html = page(admin_client)
    if connection.vendor == "postgresql":
        assert seen.finished_estimated is True
        assert all(s.succeeded >= 1 for s in seen.queues)  # the planner never says 0
        assert re.fullmatch(r"≈\d+", queue_row(html, "default")["succeeded"])
        assert "the database's estimates" in html
    else:  # SQLite has no planner estimates: the counts stay exact
        assert seen.finished_estimated is False
        assert queue_row(html, "default")["succeeded"] == "1"
    assert stats.queue_stats(now=START)[0].succeeded == 1  # ``jobs status``: exact


@pytest.mark.rolled_back_ddl
def test_index_serves_on_with_the_summary_unavailable_when_the_jobs_table_is_gone(
    admin_client: Client,
) -> None:
    from django.db import connection

    with connection.cursor() as cursor:  # rolled back with the test's transaction
        cursor.execute("ALTER TABLE django_jobs_job RENAME TO django_jobs_job_away")
    html = page(admin_client, INDEX)
    assert "The jobs summary is unavailable" in html
    assert "Site administration" in html  # the rest of the index is there
