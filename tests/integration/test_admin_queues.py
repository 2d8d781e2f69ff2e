"""The queues page, through the test client: which queues it lists, their state, limits and
counts, the pause and resume actions and who may use them; a paused queue on the dashboard."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin import helpers
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings
from django.urls import reverse
from freezegun import freeze_time

from django_jobs import pause_queue, schedule_job
from django_jobs.models import Job, JobStatus, Queue
from tests.conftest import START

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:django_jobs_queue_changelist"
DASHBOARD = "admin:django_jobs_dashboard"
HOUR = timedelta(hours=1)
MakeJob = Callable[..., Job]
PLAIN = {"default": {"workers": 2}, "emails": {"workers": 1}}
# A queue with a global and a rate limit.
LIMITED = {
    "default": {"workers": 2, "global_limit": 2, "rate_limit": "100/m"},
    "emails": {"workers": 1},
}


@pytest.fixture(autouse=True)
def frozen() -> Iterator[None]:
    """The page reads ``timezone.now()``: START, where the rows are made."""
    with freeze_time(START):
        yield


def changelist(client: Client) -> Any:
    response = client.get(reverse(CHANGELIST))
    assert response.status_code == 200
    return response


def listed(response: Any) -> list[str]:
    return [queue.name for queue in response.context["cl"].result_list]


def cells(response: Any, queue: str) -> dict[str, str]:
    """The text of each cell of ``queue``'s row, by column."""
    page = response.content.decode()
    rows = re.findall(r"<tr>(.*?)</tr>", page, re.S)
    [row] = [row for row in rows if f'value="{queue}"' in row]
    found = re.findall(r'<t[dh] class="field-(\w+)"[^>]*>(.*?)</t[dh]>', row, re.S)
    return {column: re.sub(r"<[^>]+>", "", text).strip() for column, text in found}


def row_heading(page: str, queue: str) -> str:
    """The heading cell of ``queue``'s row on the dashboard (its name, and a paused mark)."""
    found = re.search(
        rf'<tr class="jobs-queue" data-queue="{queue}">\s*<th scope="row">(.*?)</th>', page
    )
    assert found, f"no row for queue {queue!r}"
    return found.group(1)


def post_action(client: Client, action: str, names: list[str]) -> Any:
    return client.post(
        reverse(CHANGELIST),
        {
            "action": action,
            "index": "0",
            "select_across": "0",
            helpers.ACTION_CHECKBOX_NAME: names,
        },
        follow=True,
    )


def messages_of(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def paused_at(name: str) -> Any:
    return Queue.objects.get(name=name).paused_at


def test_queue_changelist_lists_configured_queues_live_jobs_queues_and_rows(
    admin_client: Client, make_job: MakeJob
) -> None:
    make_job(queue="reports")  # pending: listed
    make_job(queue="imports", status=JobStatus.RUNNING, lease_owner="w", lease_expires_at=START)
    make_job(queue="archive", status=JobStatus.SUCCEEDED, finished_at=START)  # finished only
    Queue.objects.create(name="old")  # a row of its own, no job

    with override_settings(DJANGO_JOBS={"QUEUES": PLAIN}):
        response = changelist(admin_client)

    assert listed(response) == ["default", "emails", "imports", "old", "reports"]
    assert not Queue.objects.filter(name="archive").exists()
    assert Queue.objects.filter(paused_at__isnull=False).count() == 0  # rows made, served


def test_queue_changelist_shows_paused_since_and_served(
    admin_client: Client, make_job: MakeJob
) -> None:
    pause_queue("emails", now=START - HOUR)

    response = changelist(admin_client)

    assert cells(response, "emails")["state"] == "paused since 2026-01-05 11:00:00 UTC"
    assert cells(response, "default")["state"] == "served"


def test_queue_changelist_shows_limits_in_words_and_counts_slots_running_and_due(
    admin_client: Client, make_job: MakeJob
) -> None:
    make_job(run_at=START - HOUR)  # due
    make_job(run_at=START)  # due
    make_job(run_at=START + HOUR)  # scheduled: not due
    make_job(status=JobStatus.RUNNING, lease_owner="w", lease_expires_at=START + HOUR)
    make_job(status=JobStatus.RUNNING, lease_owner="w", lease_expires_at=START - HOUR)  # lapsed
    make_job(name="tests.keyed", queue="keyed", concurrency_key="a", concurrency_limit=1)

    with override_settings(DJANGO_JOBS={"QUEUES": LIMITED}):
        response = changelist(admin_client)

    assert cells(response, "default") == {
        "queue_name": "default",
        "state": "served",
        "limits": "global limit 2, 100 per minute",
        "slots": "1 of 2",
        "running": "1",
        "due": "2",
    }
    emails = cells(response, "emails")
    assert (emails["limits"], emails["slots"], emails["running"], emails["due"]) == (
        "—",
        "—",
        "0",
        "0",
    )
    keyed = cells(response, "keyed")  # tests.keyed is declared @job(concurrency=1)
    assert (keyed["limits"], keyed["slots"], keyed["due"]) == ("per key", "—", "1")


def test_queue_name_links_to_the_queues_jobs(admin_client: Client) -> None:
    page = changelist(admin_client).content.decode()
    assert f'href="{reverse("admin:django_jobs_job_changelist")}?queue=emails"' in page


def page_queries(client: Client) -> int:
    changelist(client)  # the rows made first: later loads insert nothing
    with CaptureQueriesContext(connection) as queries:
        changelist(client)
    return len(queries)


def test_queue_changelist_counts_the_jobs_in_one_query_whatever_the_number_of_queues(
    admin_client: Client, make_job: MakeJob
) -> None:
    make_job()
    few = page_queries(admin_client)
    for index in range(8):
        make_job(queue=f"q{index}")
        make_job(queue=f"q{index}", status=JobStatus.RUNNING, lease_expires_at=START + HOUR)
    assert page_queries(admin_client) == few
    with CaptureQueriesContext(connection) as queries:
        changelist(admin_client)
    grouped = [
        q["sql"] for q in queries if "GROUP BY" in q["sql"] and "django_jobs_job" in q["sql"]
    ]
    assert len(grouped) == 1


def test_pause_and_resume_actions_change_the_queues_and_say_how_many(
    admin_client: Client,
) -> None:
    changelist(admin_client)  # the configured queues' rows
    pause_queue("emails", now=START - HOUR)

    response = post_action(admin_client, "pause_selected", ["default", "emails"])

    assert response.status_code == 200
    assert paused_at("default") == START
    assert paused_at("emails") == START - HOUR  # paused already: left as it was
    assert messages_of(response) == [
        "1 queue(s) paused: their running jobs finish, none start until they are resumed.",
        "1 queue(s) paused already: emails.",
    ]

    response = post_action(admin_client, "resume_selected", ["default", "emails"])

    assert (paused_at("default"), paused_at("emails")) == (None, None)
    assert messages_of(response) == ["2 queue(s) resumed: their workers start their jobs again."]
    response = post_action(admin_client, "resume_selected", ["default"])
    assert messages_of(response) == ["1 queue(s) not paused, served already: default."]


def test_queue_actions_need_the_change_permission(staff_client: Callable[..., Client]) -> None:
    viewer = staff_client("view_queue")
    page = changelist(viewer).content.decode()
    assert "pause_selected" not in page
    assert "resume_selected" not in page

    post_action(viewer, "pause_selected", ["default"])

    assert not Queue.objects.filter(name="default", paused_at__isnull=False).exists()


def test_queue_page_of_a_view_only_user_writes_nothing(
    staff_client: Callable[..., Client],
) -> None:
    """A GET is safe: only staff who may pause queues make the missing rows."""
    schedule_job("tests.ok", {}, queue="reports")
    viewer = staff_client("view_queue")
    with CaptureQueriesContext(connection) as sent:
        assert changelist(viewer).status_code == 200
    writes = [q["sql"] for q in sent.captured_queries if not q["sql"].lstrip().startswith("SELECT")]
    assert [sql for sql in writes if "django_jobs_queue" in sql] == []
    assert not Queue.objects.filter(name="reports").exists()
    assert changelist(staff_client("view_queue", "change_queue")).status_code == 200
    assert Queue.objects.filter(name="reports").exists()


def test_queue_actions_are_offered_with_the_change_permission(
    staff_client: Callable[..., Client],
) -> None:
    operator = staff_client("view_queue", "change_queue")
    page = changelist(operator).content.decode()
    assert 'value="pause_selected"' in page
    assert 'value="resume_selected"' in page
    assert 'value="delete_selected"' not in page
    post_action(operator, "pause_selected", ["default"])
    assert paused_at("default") == START


def test_queue_page_adds_and_edits_nothing(admin_client: Client) -> None:
    assert admin_client.get(reverse("admin:django_jobs_queue_add")).status_code == 403
    page = changelist(admin_client).content.decode()
    assert reverse("admin:django_jobs_queue_add") not in page
    assert reverse("admin:django_jobs_queue_change", args=["default"]) not in page


def test_dashboard_flags_a_paused_queue_marks_its_row_and_links_to_the_queues_page(
    admin_client: Client, make_job: MakeJob
) -> None:
    make_job(queue="emails")
    pause_queue("emails", now=START - HOUR)

    page = admin_client.get(reverse(DASHBOARD)).content.decode()

    flag = re.search(r'<li class="warning jobs-flag-paused" data-queue="emails">(.*?)</li>', page)
    assert flag, "no paused flag for emails"
    assert re.sub(r"<[^>]+>", "", flag.group(1)).strip() == (
        "Queue emails is paused since 2026-01-05 11:00:00 UTC: its running jobs finish, none "
        "start until it is resumed; 1 job due. Queues"
    )
    assert f'href="{reverse(CHANGELIST)}"' in flag.group(1)
    assert "paused" in row_heading(page, "emails")
    assert "paused" not in row_heading(page, "default")
    assert 'jobs-flag-paused" data-queue="default"' not in page
    assert f'<a href="{reverse(CHANGELIST)}" class="section jobs-queues-link"' in page  # caption


def test_index_summary_flags_a_paused_queue(admin_client: Client) -> None:
    pause_queue("reports", now=START, force=True)
    page = admin_client.get(reverse("admin:index")).content.decode()
    assert '<li class="warning jobs-flag-paused" data-queue="reports">' in page


def test_remove_action_removes_a_stray_paused_queue_and_keeps_the_others(
    admin_client: Client, make_job: Any
) -> None:
    """A queue paused under a typo (forced) can be removed from the page; a queue the
    project names, or one a job is on, is kept."""
    pause_queue("emial", now=START, force=True)
    make_job(queue="backfill")
    pause_queue("backfill", now=START)
    changelist(admin_client)  # the configured queues' rows
    response = post_action(admin_client, "remove_selected", ["emial", "backfill", "emails"])
    assert messages_of(response) == [
        "1 queue(s) named nowhere removed: emial.",
        "2 queue(s) kept, as the project names them or jobs are on them: backfill, emails.",
    ]
    assert not Queue.objects.filter(name="emial").exists()
    assert paused_at("backfill") == START
