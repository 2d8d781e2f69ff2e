"""Job.objects' named states: the conditions the rescuer, the drain check, the stats and
the start-up warning share, spelled out once."""

from datetime import timedelta

import pytest

from django_jobs.models import Job, JobStatus
from tests.conftest import START

pytestmark = pytest.mark.django_db

LATER = START + timedelta(minutes=1)
EARLIER = START - timedelta(minutes=1)


def ids(queryset):
    return set(queryset.values_list("id", flat=True))


def test_job_states_due_is_pending_due_with_an_attempt_left(make_job):
    due = make_job(run_at=START)
    make_job(run_at=LATER)  # not yet
    make_job(run_at=START, attempts_used=3, max_attempts=3)  # no attempt left
    make_job(run_at=START, status=JobStatus.RUNNING)
    exhausted = Job.objects.filter(attempts_used=3).get()
    assert ids(Job.objects.due(START)) == {due.pk}
    assert ids(Job.objects.exhausted()) == {exhausted.pk}


def test_job_states_unleased_is_running_without_a_live_lease(make_job):
    running = {"status": JobStatus.RUNNING, "lease_owner": "w1"}
    live = make_job(**running, lease_expires_at=LATER)
    expired = make_job(**running, lease_expires_at=EARLIER)
    no_expiry = make_job(**running, lease_expires_at=None)
    no_owner = make_job(status=JobStatus.RUNNING, lease_owner="", lease_expires_at=LATER)
    make_job(lease_owner="w1", lease_expires_at=EARLIER)  # pending: not running at all
    assert ids(Job.objects.unleased(START)) == {expired.pk, no_expiry.pk, no_owner.pk}
    assert ids(Job.objects.held_by(["w1"])) == {live.pk, expired.pk, no_expiry.pk}
    assert ids(Job.objects.running()) == {live.pk, expired.pk, no_expiry.pk, no_owner.pk}
