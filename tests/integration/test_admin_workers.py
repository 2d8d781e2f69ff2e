"""The workers page, through the test client: columns, the stale flag, one query per page."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from freezegun import freeze_time

from django_jobs.conf import settings as jobs_settings
from django_jobs.models import Job, JobStatus, Leader, WorkerProcess
from django_jobs.stats import LATE_BEATS
from tests.support.leaders import lease_of

pytestmark = pytest.mark.django_db

UTC = timezone.utc
NOW = datetime(2026, 1, 5, 12, 0, 0, tzinfo=UTC)
CHANGELIST = "admin:django_jobs_workerprocess_changelist"


def make_worker(worker_id: str, *, beat_ago: float = 1, **overrides: Any) -> WorkerProcess:
    values: dict[str, Any] = {
        "host": worker_id.split(":")[0],
        "pid": 4242,
        "queues": ["default"],
        "started_at": NOW - timedelta(hours=1),
        "last_heartbeat_at": NOW - timedelta(seconds=beat_ago),
    }
    values.update(overrides)
    return WorkerProcess.objects.create(id=worker_id, **values)


def running_job(make_job: Callable[..., Job], owner: str, name: str = "tests.ok") -> Job:
    return make_job(name=name, status=JobStatus.RUNNING, lease_owner=owner, attempt=1)


def changelist(client: Client, query: str = "") -> Any:
    with freeze_time(NOW):
        response = client.get(reverse(CHANGELIST) + query)
    assert response.status_code == 200
    return response


def listed(response: Any) -> list[str]:
    return [worker.id for worker in response.context["cl"].result_list]


def cell(response: Any, worker_id: str, column: str) -> str:
    """The text of ``column``'s cell in the row of ``worker_id``."""
    page = response.content.decode()
    row = page[
        page.index(reverse("admin:django_jobs_workerprocess_change", args=[quote(worker_id)])) :
    ]
    start = row.index(f'class="field-{column}"')
    return row[row.index(">", start) + 1 : row.index("</td>", start)]


def test_worker_changelist_shows_host_pid_queues_times_jobs_run_and_running_jobs(
    admin_client, make_job
):
    make_worker(
        "web-1:4242:abcd", beat_ago=4, queues=["default", "emails"], host="web-1", jobs_run=17
    )
    first = running_job(make_job, "web-1:4242:abcd", "tests.ok")
    second = running_job(make_job, "web-1:4242:abcd", "tests.sleepy")
    make_job(status=JobStatus.PENDING, lease_owner="web-1:4242:abcd")  # not running: not shown
    make_job(status=JobStatus.SUCCEEDED, lease_owner="web-1:4242:abcd")

    response = changelist(admin_client)

    worker = "web-1:4242:abcd"
    change = reverse("admin:django_jobs_workerprocess_change", args=[quote(worker)])
    assert f'<th class="field-host"><a href="{change}">web-1</a></th>' in response.content.decode()
    assert cell(response, worker, "pid") == "4242"
    assert cell(response, worker, "queue_names") == "default, emails"
    assert cell(response, worker, "started") == "2026-01-05 11:00:00 UTC"
    assert (
        cell(response, worker, "heartbeat")
        == '<span title="2026-01-05 11:59:56 UTC">4 s ago</span>'
    )
    assert cell(response, worker, "total_jobs_run") == "17"
    job_url = "/admin/django_jobs/job/{}/change/"
    assert cell(response, worker, "running_jobs") == (
        f'<a href="{job_url.format(first.pk)}">tests.ok #{first.pk}</a>, '
        f'<a href="{job_url.format(second.pk)}">tests.sleepy #{second.pk}</a>'
    )


def test_worker_changelist_shows_times_in_the_active_time_zone(admin_client, settings):
    settings.TIME_ZONE = "Europe/Paris"
    make_worker("web-1:1:a", beat_ago=3725)

    response = changelist(admin_client)

    assert cell(response, "web-1:1:a", "started") == "2026-01-05 12:00:00 CET"
    assert cell(response, "web-1:1:a", "heartbeat") == (
        '<span title="2026-01-05 11:57:55 CET">1 h 2 min ago</span>'
    )


def test_worker_changelist_shows_an_idle_worker_without_jobs(admin_client, make_job):
    make_worker("idle:1:a")
    running_job(make_job, "another:1:b")  # leased to a worker that is not this one

    response = changelist(admin_client)

    assert cell(response, "idle:1:a", "running_jobs") == "-"
    assert cell(response, "idle:1:a", "total_jobs_run") == "0"
    with freeze_time(NOW):
        page = admin_client.get(
            reverse("admin:django_jobs_workerprocess_change", args=["idle:1:a"])
        )
    assert '<div class="readonly">-</div>' in page.content.decode()
    assert '<div class="readonly">None</div>' not in page.content.decode()


def stale_after() -> float:
    return LATE_BEATS * jobs_settings.heartbeat_seconds()


def test_worker_changelist_flags_workers_that_missed_their_heartbeats(admin_client):
    make_worker("fresh:1:a", beat_ago=1)
    make_worker("edge:1:b", beat_ago=stale_after())  # exactly two beats late: not yet
    make_worker("late:1:c", beat_ago=stale_after() + 1)

    response = changelist(admin_client)

    assert "live" in cell(response, "fresh:1:a", "state")
    assert "live" in cell(response, "edge:1:b", "state")
    assert "stale" in cell(response, "late:1:c", "state")
    assert 'class="jobs-worker-stale"' in cell(response, "late:1:c", "state")


def test_worker_changelist_filters_live_and_stale(admin_client):
    make_worker("fresh:1:a", beat_ago=1)
    make_worker("edge:1:b", beat_ago=stale_after())
    make_worker("late:1:c", beat_ago=stale_after() + 1)

    assert sorted(listed(changelist(admin_client, "?heartbeat=live"))) == [
        "edge:1:b",
        "fresh:1:a",
    ]
    assert listed(changelist(admin_client, "?heartbeat=stale")) == ["late:1:c"]
    assert len(listed(changelist(admin_client))) == 3


def page_queries(client: Client, query: str = "") -> int:
    with CaptureQueriesContext(connection) as queries:
        changelist(client, query)
    return len(queries)


@pytest.mark.parametrize("query", ["", "?heartbeat=stale"])
def test_worker_changelist_makes_as_many_queries_for_six_workers_as_for_one(
    admin_client, make_job, query
):
    make_worker("w0:1:a", beat_ago=1000)
    running_job(make_job, "w0:1:a")
    one = page_queries(admin_client, query)
    for index in range(1, 6):
        make_worker(f"w{index}:1:a", beat_ago=1000)
        running_job(make_job, f"w{index}:1:a")
        running_job(make_job, f"w{index}:1:a")

    six = page_queries(admin_client, query)

    assert six == one
    response = changelist(admin_client, query)
    assert len(listed(response)) == 6
    assert cell(response, "w5:1:a", "running_jobs").count("<a ") == 2


def test_worker_change_page_shows_the_same_read_only_fields(admin_client, make_job):
    make_worker("web-1:4242:abcd", beat_ago=stale_after() + 1, jobs_run=3)
    job = running_job(make_job, "web-1:4242:abcd")

    with freeze_time(NOW):
        response = admin_client.get(
            reverse("admin:django_jobs_workerprocess_change", args=["web-1:4242:abcd"])
        )

    assert response.status_code == 200
    page = response.content.decode()
    assert f'<a href="/admin/django_jobs/job/{job.pk}/change/">tests.ok #{job.pk}</a>' in page
    assert 'class="jobs-worker-stale"' in page
    assert "2026-01-05 11:00:00 UTC" in page
    assert 'name="_save"' not in page


def test_worker_admin_cannot_add_change_or_delete(admin_client):
    make_worker("web-1:4242:abcd")
    delete = reverse("admin:django_jobs_workerprocess_delete", args=["web-1:4242:abcd"])

    response = changelist(admin_client)

    page = response.content.decode()
    assert reverse("admin:django_jobs_workerprocess_add") not in page
    assert 'name="action"' not in page  # no bulk delete either
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert admin_client.post(reverse("admin:django_jobs_workerprocess_add"), {}).status_code == 403
    assert WorkerProcess.objects.filter(id="web-1:4242:abcd").exists()


def test_worker_changelist_needs_the_view_permission(client, django_user_model):
    user = django_user_model.objects.create_user("staff", password="unused", is_staff=True)
    client.force_login(user)
    make_worker("web-1:4242:abcd")

    assert client.get(reverse(CHANGELIST)).status_code == 403

    user.user_permissions.add(Permission.objects.get(codename="view_workerprocess"))
    assert listed(changelist(client)) == ["web-1:4242:abcd"]


def supervisor_with_children(make_job: Callable[..., Job]) -> dict[str, Job]:
    """A supervisor (runjobs --processes 2) whose two children hold a job each."""
    make_worker("web-1:100:s", pid=100, host="web-1", jobs_run=0)
    make_worker("web-1:101:a", pid=101, host="web-1", beat_ago=2, jobs_run=5)
    make_worker("web-1:102:b", pid=102, host="web-1", beat_ago=3, jobs_run=7)
    WorkerProcess.objects.exclude(id="web-1:100:s").update(supervisor="web-1:100:s")
    return {
        "a": running_job(make_job, "web-1:101:a", "tests.ok"),
        "b": running_job(make_job, "web-1:102:b", "tests.sleepy"),
    }


def test_worker_changelist_shows_a_supervisor_once_with_its_processes(admin_client, make_job):
    held = supervisor_with_children(make_job)
    make_worker("web-2:7:lone", pid=7, host="web-2")

    response = changelist(admin_client)

    assert listed(response) == ["web-1:100:s", "web-2:7:lone"]  # the children under it
    supervisor = "web-1:100:s"
    assert cell(response, supervisor, "pid") == "100"
    assert cell(response, supervisor, "total_jobs_run") == "12"  # its children's
    job_url = "/admin/django_jobs/job/{}/change/"
    a, b = held["a"].pk, held["b"].pk
    assert cell(response, supervisor, "running_jobs") == (
        f'<a href="{job_url.format(a)}">tests.ok #{a}</a>, '
        f'<a href="{job_url.format(b)}">tests.sleepy #{b}</a>'
    )
    assert cell(response, supervisor, "processes") == (
        '<div class="jobs-worker-process">pid 101: 5 jobs run, heartbeat 2 s ago; '
        f'<a href="{job_url.format(a)}">tests.ok #{a}</a></div>'
        '<div class="jobs-worker-process">pid 102: 7 jobs run, heartbeat 3 s ago; '
        f'<a href="{job_url.format(b)}">tests.sleepy #{b}</a></div>'
    )
    assert cell(response, "web-2:7:lone", "processes") == "-"
    with freeze_time(NOW):
        page = admin_client.get(
            reverse("admin:django_jobs_workerprocess_change", args=[quote(supervisor)])
        )
    assert "pid 101: 5 jobs run" in page.content.decode()


def test_worker_changelist_flags_a_stale_process_of_a_supervisor(admin_client, make_job):
    supervisor_with_children(make_job)
    WorkerProcess.objects.filter(id="web-1:102:b").update(
        last_heartbeat_at=NOW - timedelta(seconds=stale_after() + 1)
    )
    processes = cell(changelist(admin_client), "web-1:100:s", "processes")
    assert "pid 101: 5 jobs run, heartbeat 2 s ago; " in processes
    assert "pid 102: 7 jobs run, heartbeat " in processes
    assert processes.count("<strong>stale</strong>") == 1


def test_worker_changelist_lists_a_process_whose_supervisor_row_is_gone(admin_client, make_job):
    supervisor_with_children(make_job)
    WorkerProcess.objects.filter(id="web-1:100:s").delete()  # swept during an outage, say

    assert listed(changelist(admin_client)) == ["web-1:101:a", "web-1:102:b"]


def test_worker_changelist_queries_do_not_grow_with_supervisors(admin_client, make_job):
    supervisor_with_children(make_job)
    one = page_queries(admin_client)
    for n in range(2, 5):
        make_worker(f"h{n}:1:s", host=f"h{n}", pid=1)
        make_worker(f"h{n}:2:c", host=f"h{n}", pid=2, supervisor=f"h{n}:1:s")
        running_job(make_job, f"h{n}:2:c")
    assert page_queries(admin_client) == one


def lead(owner: str, *, expires_at: datetime | None = None) -> Leader:
    return lease_of(owner, NOW, expires_at)


LEADER_BADGE = (
    ' <strong class="jobs-worker-leader" title="the leader since 2026-01-05 11:55:00 UTC'
    " (epoch 3): it takes back expired leases, fires the recurring schedules and prunes"
    ' finished jobs for every worker">leader</strong>'
)


def test_worker_changelist_marks_the_process_that_holds_the_leader_lease(admin_client):
    make_worker("web-1:1:a")
    make_worker("web-2:2:b", beat_ago=stale_after() + 1)  # a stale process may still lead
    lead("web-2:2:b")

    response = changelist(admin_client)

    assert cell(response, "web-1:1:a", "state") == '<span class="jobs-worker-live">live</span>'
    assert cell(response, "web-2:2:b", "state").endswith("stale</strong>" + LEADER_BADGE)
    with freeze_time(NOW):
        page = admin_client.get(
            reverse("admin:django_jobs_workerprocess_change", args=["web-2:2:b"])
        )
    assert LEADER_BADGE in page.content.decode()


@pytest.mark.parametrize("expires_in", [0, -30])  # lapsing now; handed over (resigned)
def test_worker_changelist_marks_nobody_for_a_lapsed_leader_lease(admin_client, expires_in):
    make_worker("web-1:1:a")
    lead("web-1:1:a", expires_at=NOW + timedelta(seconds=expires_in))

    response = changelist(admin_client)

    assert cell(response, "web-1:1:a", "state") == '<span class="jobs-worker-live">live</span>'
    assert "jobs-worker-leader" not in response.content.decode()
    Leader.objects.update(expires_at=NOW + timedelta(microseconds=1))  # renewed: it holds
    assert cell(changelist(admin_client), "web-1:1:a", "state").endswith(LEADER_BADGE)


def test_worker_changelist_marks_the_leading_process_of_a_supervisor_on_its_line(
    admin_client, make_job
):
    held = supervisor_with_children(make_job)
    lead("web-1:102:b")

    response = changelist(admin_client)

    assert "jobs-worker-leader" not in cell(response, "web-1:100:s", "state")
    b = held["b"].pk
    assert cell(response, "web-1:100:s", "processes").endswith(
        '<div class="jobs-worker-process">pid 102: 7 jobs run, heartbeat 3 s ago'
        f'{LEADER_BADGE}; <a href="/admin/django_jobs/job/{b}/change/">tests.sleepy #{b}</a></div>'
    )
    assert cell(response, "web-1:100:s", "processes").count("jobs-worker-leader") == 1


def test_sweep_removes_the_rows_of_a_dead_supervisor_and_its_processes(make_job):
    from django_jobs.maintenance.workers import sweep_workers

    supervisor_with_children(make_job)
    make_worker("web-2:7:lone", beat_ago=1)
    WorkerProcess.objects.filter(host="web-1").update(last_heartbeat_at=NOW - timedelta(hours=1))
    assert sweep_workers(NOW, lease_seconds=300) == 3
    assert list(WorkerProcess.objects.values_list("id", flat=True)) == ["web-2:7:lone"]
