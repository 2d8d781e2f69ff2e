"""An attempt keeps its traceback: stored masked and bounded, shown by the admin and `jobs show`."""

import io
import json

import pytest
from django.core.management import call_command
from django.urls import reverse

from django_jobs.models import Attempt, Job, JobStatus
from django_jobs.outcomes import TRACEBACK_LIMIT

pytestmark = pytest.mark.django_db

SECRET = "tok_9f8e7d6c5b4a"


def failed_attempt(worker, make_job, depth: int = 3) -> Attempt:
    payload = {"depth": depth, "api_token": SECRET}
    job = make_job(name="tests.deep_failure", payload=payload, max_attempts=1)
    assert worker().run_once().dead_lettered == 1
    return Attempt.objects.get(job=job)


def test_failed_attempt_keeps_its_traceback_down_to_the_raising_frame(worker, make_job):
    attempt = failed_attempt(worker, make_job)
    assert attempt.error == "ValueError: token *** refused at the bottom"
    trace = attempt.traceback
    assert trace.startswith("Traceback (most recent call last):\n")
    assert trace.count(", in _descend\n") == 4  # three calls down, and the one that raised
    assert 'raise ValueError(f"token {secret} refused at the bottom")' in trace
    assert trace.rstrip().endswith("ValueError: token *** refused at the bottom")


def test_failed_attempt_traceback_is_masked_as_the_error_line_is(worker, make_job):
    attempt = failed_attempt(worker, make_job)
    assert SECRET not in attempt.traceback
    assert "***" in attempt.traceback


def test_deep_traceback_is_cut_to_its_first_line_and_its_end(worker, make_job):
    attempt = failed_attempt(worker, make_job, depth=400)
    trace = attempt.traceback
    assert len(trace) <= TRACEBACK_LIMIT
    assert trace.startswith("Traceback (most recent call last):\n  ...\n")
    assert trace.rstrip().endswith("ValueError: token *** refused at the bottom")
    assert 'raise ValueError(f"token {secret} refused at the bottom")' in trace


def test_succeeded_attempt_stores_no_traceback(worker, make_job):
    job = make_job(name="tests.ok")
    assert worker().run_once().succeeded == 1
    assert Attempt.objects.get(job=job).traceback == ""


def test_retried_attempts_each_keep_their_own_traceback(worker, make_job, clock):
    job = make_job(name="tests.fail", max_attempts=2)
    worker().run_once()
    clock.advance(3600)
    worker().run_once()
    traces = [a.traceback for a in Attempt.objects.filter(job=job).order_by("number")]
    assert [t.rstrip().rsplit("\n", 1)[-1] for t in traces] == [
        "RuntimeError: boom 1",
        "RuntimeError: boom 2",
    ]
    assert Job.objects.get(pk=job.pk).status == JobStatus.DEAD_LETTERED


def test_jobs_show_prints_the_latest_traceback_and_json_carries_each(worker, make_job):
    attempt = failed_attempt(worker, make_job)
    out = io.StringIO()
    call_command("jobs", "show", str(attempt.job_id), stdout=out)
    text = out.getvalue()
    assert "Traceback of attempt 1:\nTraceback (most recent call last):" in text
    assert text.rstrip().endswith("ValueError: token *** refused at the bottom")
    out = io.StringIO()
    call_command("jobs", "show", str(attempt.job_id), "--json", stdout=out)
    [shown] = json.loads(out.getvalue())["attempts"]
    assert shown["traceback"] == attempt.traceback


def test_admin_job_page_folds_the_traceback_under_the_error(worker, make_job, admin_client):
    attempt = failed_attempt(worker, make_job)
    for page in ("job", "deadletter"):
        url = reverse(f"admin:django_jobs_{page}_change", args=[attempt.job_id])
        html = admin_client.get(url).content.decode()
        assert '<details class="django-jobs-traceback"><summary>Traceback</summary>' in html
        assert "ValueError: token *** refused at the bottom" in html
        assert ", in _descend" in html
        assert SECRET not in html
