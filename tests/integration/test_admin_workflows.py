"""Workflows in the admin, through the test client: a job's graph of what it waits for and
what waits for it, the batches' list and page, and the Jobs list a batch links to."""

from __future__ import annotations

import re

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_jobs import batch, cancel_job, chain, schedule_job
from django_jobs.admin.workflow import SHOWN_EACH_SIDE, workflow_of
from django_jobs.models import Batch, Job, JobStatus
from django_jobs.scheduling import JobSpec

pytestmark = pytest.mark.django_db


def change_url(job: Job) -> str:
    return reverse("admin:django_jobs_job_change", args=[job.pk])


def test_admin_job_page_draws_what_it_waits_for_and_what_waits_for_it(admin_client):
    with batch(name="nightly") as b:
        first, middle, last = chain(
            JobSpec("tests.ok", 1), JobSpec("tests.ok", 2), JobSpec("tests.ok", 3)
        )
    page = admin_client.get(change_url(middle)).content.decode()
    waits_for = page.split('class="django-jobs-graph-side django-jobs-waits-for"')[1]
    waits_for = waits_for.split("django-jobs-graph-arrow")[0]
    assert f'href="{change_url(first)}" data-job="{first.pk}"' in waits_for
    assert f"tests.ok #{first.pk}" in waits_for and ">pending<" in waits_for
    waited_for_by = page.split('class="django-jobs-graph-side django-jobs-waited-for-by"')[1]
    assert f'href="{change_url(last)}" data-job="{last.pk}"' in waited_for_by
    assert ">waiting<" in waited_for_by
    batch_url = reverse("admin:django_jobs_batch_change", args=[b.pk])
    assert f'<a href="{batch_url}">batch #{b.pk} nightly (0/3 ended)</a>' in page


def test_admin_plain_job_page_shows_no_workflow_and_looks_nothing_up(admin_client):
    plain = schedule_job("tests.ok")
    with CaptureQueriesContext(connection) as queries:
        assert workflow_of(plain) is None
    assert len(queries) == 0
    assert 'class="module aligned django-jobs-workflow"' not in (
        admin_client.get(change_url(plain)).content.decode()
    )


def test_admin_job_graph_caps_each_side_and_links_the_rest(admin_client):
    first = schedule_job("tests.ok")
    for _ in range(SHOWN_EACH_SIDE + 3):
        schedule_job("tests.ok", depends_on=[first])
    page = admin_client.get(change_url(first)).content.decode()
    side = page.split('class="django-jobs-graph-side django-jobs-waited-for-by"')[1]
    assert side.count("data-job=") == SHOWN_EACH_SIDE
    [more] = re.findall(r'<a class="django-jobs-graph-more" href="([^"]+)">and 3 more</a>', side)
    listed = admin_client.get(more.replace("&amp;", "&")).content.decode()
    assert listed.count('class="action-select"') == SHOWN_EACH_SIDE + 3  # every dependent


def test_admin_batches_list_and_page_show_progress_callbacks_and_members(admin_client, worker):
    with batch(on_finish=("tests.ok", None), on_failure=("tests.flow_step", "bad")) as b:
        members = [schedule_job("tests.ok"), schedule_job("tests.flow_fail")]
    listing = admin_client.get(reverse("admin:django_jobs_batch_changelist")).content.decode()
    assert '<progress value="0" max="2"></progress> 0 of 2 ended' in listing
    page = admin_client.get(reverse("admin:django_jobs_batch_change", args=[b.pk]))
    text = page.content.decode()
    assert "<td>on finish</td><td>tests.ok</td>" in text and "not yet" in text
    for member in members:
        assert f'href="{change_url(member)}" data-job="{member.pk}"' in text
    members_url = reverse("admin:django_jobs_job_changelist") + f"?batch__id__exact={b.pk}"
    assert f'href="{members_url}"' in text
    listed = admin_client.get(members_url).content.decode()
    assert listed.count('class="action-select"') == 2


def test_admin_batch_page_links_the_callbacks_once_enqueued(admin_client, worker, clock):
    from datetime import timedelta

    from django.utils import timezone

    clock.advance((timezone.now() - clock.now() + timedelta(minutes=1)).total_seconds())
    with batch(on_finish=("tests.ok", None)) as b:
        schedule_job("tests.ok")
    w = worker()
    while w.run_once().claimed:
        pass
    b.refresh_from_db()
    callback = b.callback_jobs["on_finish"]
    text = admin_client.get(reverse("admin:django_jobs_batch_change", args=[b.pk])).content
    callback_url = reverse("admin:django_jobs_job_change", args=[callback])
    assert f'<a href="{callback_url}">#{callback}</a>'.encode() in text
    assert b"1 of 1 ended" in text and b"1 succeeded, 0 dead-lettered, 0 cancelled" in text


def test_admin_batches_list_says_which_callbacks_went_in(admin_client):
    with batch(on_success=("tests.ok", None), on_failure=("tests.flow_step", "bad")) as b:
        member = schedule_job("tests.ok")
    with batch() as plain:
        pass
    listing = reverse("admin:django_jobs_batch_changelist")
    row = batch_row(admin_client.get(listing).content.decode(), b)
    assert "on success: not yet, on failure: not yet" in row
    assert '<td class="field-callbacks_in">-</td>' in batch_row(
        admin_client.get(listing).content.decode(), plain
    )
    cancel_job(member.pk)  # the batch's last member: it finishes, on failure goes in
    b.refresh_from_db()
    callback = b.callback_jobs["on_failure"]
    row = batch_row(admin_client.get(listing).content.decode(), b)
    link = f'<a href="{reverse("admin:django_jobs_job_change", args=[callback])}">#{callback}</a>'
    assert f"on success: not run, on failure: {link}" in row
    page = admin_client.get(reverse("admin:django_jobs_batch_change", args=[b.pk])).content
    assert b"<td>on success</td><td>tests.ok</td><td>not run</td>" in page
    assert f"<td>on failure</td><td>tests.flow_step</td><td>{link}</td>".encode() in page


def batch_row(listing: str, b: Batch) -> str:
    """The batches list's row of batch ``b``."""
    page = reverse("admin:django_jobs_batch_change", args=[b.pk])
    [row] = [row for row in listing.split("<tr") if f'href="{page}"' in row]
    return row


def messages_of(response) -> list[str]:
    return [message.message for message in get_messages(response.wsgi_request)]


def test_admin_retry_of_a_failed_dependency_says_its_dependents_wait_again(admin_client):
    first, second, third = chain(
        JobSpec("tests.ok", 1), JobSpec("tests.ok", 2), JobSpec("tests.ok", 3)
    )
    cancel_job(first.pk)  # and the cascade cancels second and third
    retry = reverse("admin:django_jobs_job_retry", args=[first.pk])
    response = admin_client.post(retry, follow=True)
    assert response.redirect_chain == [(change_url(first), 302)]
    assert messages_of(response) == [
        "1 job(s) queued again.",
        "2 dependent job(s) back to waiting (a failed dependency had cancelled them).",
    ]
    assert [Job.objects.get(pk=j.pk).status for j in (first, second, third)] == [
        JobStatus.PENDING,
        JobStatus.WAITING,
        JobStatus.WAITING,
    ]


def test_admin_retry_of_a_job_whose_dependency_failed_says_it_waits_again(admin_client):
    first, second, third = chain(
        JobSpec("tests.ok", 1), JobSpec("tests.ok", 2), JobSpec("tests.ok", 3)
    )
    cancel_job(first.pk)
    retry = reverse("admin:django_jobs_job_retry", args=[second.pk])
    assert messages_of(admin_client.post(retry, follow=True)) == [
        "1 job(s) back to waiting for the jobs they depend on.",
        "1 dependent job(s) back to waiting (a failed dependency had cancelled them).",
    ]
    assert Job.objects.get(pk=second.pk).status == JobStatus.WAITING


def test_admin_jobs_list_filters_waiting_jobs(admin_client):
    first = schedule_job("tests.ok")
    waiting = schedule_job("tests.ok", depends_on=[first])
    url = reverse("admin:django_jobs_job_changelist") + "?status__exact=waiting"
    page = admin_client.get(url).content.decode()
    assert page.count('class="action-select"') == 1
    assert f'value="{waiting.pk}"' in page
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.WAITING


def test_admin_batches_cannot_be_added_changed_or_deleted(admin_client):
    with batch() as b:
        pass
    assert admin_client.get(reverse("admin:django_jobs_batch_add")).status_code == 403
    delete = reverse("admin:django_jobs_batch_delete", args=[b.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert Batch.objects.filter(pk=b.pk).exists()
