"""The site as its users reach it: a real ``runserver`` and a real ``runjobs``, over HTTP.

A view enqueues in its request's transaction, a worker runs the job, and the admin's
control room answers (the dashboard, the jobs, the workers with their leader). In the
pooled suite both processes go through PgBouncer in transaction mode, as a site behind
one does.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from django_jobs.models import Job, JobStatus, Leader
from tests.conftest import RunjobsProcesses, wait_until
from tests.support.served import Browser, free_port

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_served_site_enqueues_from_a_view_and_its_admin_shows_the_leader(
    runjobs_process: RunjobsProcesses,
) -> None:
    get_user_model().objects.create_superuser("admin", "admin@example.com", "not-secret")
    port = free_port()
    site = runjobs_process.start("--noreload", f"127.0.0.1:{port}", command="runserver")
    worker = runjobs_process.start("--queue", "default", "--queue", "emails")
    browser = Browser(f"http://127.0.0.1:{port}")

    wait_until(browser.up, timeout=30)
    # The signup view is a plain POST with its CSRF token: it needs the cookie first.
    status, body = browser.post("/signup/", {"email": "ada@example.com"})
    assert status == 202, body
    job = Job.objects.get(name="emails.welcome")
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=30)

    status, _ = browser.post(
        "/admin/login/?next=/admin/", {"username": "admin", "password": "not-secret"}
    )
    assert status == 200
    leader = wait_until(lambda: Leader.objects.filter(owner__contains=f":{worker.pid}:").first())
    status, dashboard = browser.get("/admin/django_jobs/dashboard/")
    assert status == 200 and "Leader:" in dashboard, dashboard[:2000]
    assert leader.owner in dashboard
    status, workers = browser.get("/admin/django_jobs/workerprocess/")
    assert status == 200
    assert re.search(r"jobs-worker-leader", workers), workers[:2000]
    status, jobs = browser.get(f"/admin/django_jobs/job/{job.pk}/change/")
    assert status == 200 and "emails.welcome" in jobs
    assert site.poll() is None, runjobs_process.log(site)
    assert worker.poll() is None, runjobs_process.log(worker)
