"""``manage.py jobs pause`` and ``jobs resume``; paused queues and limits in ``jobs status``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core.management.base import CommandError
from django.test.utils import override_settings

from django_jobs import pause_queue
from django_jobs.models import Job, JobStatus, Queue
from tests.conftest import START, by_queue, jobs, jobs_json

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)
MakeJob = Callable[..., Job]
PLAIN = {"default": {"workers": 2}, "emails": {"workers": 1}}
LIMITED = {
    "default": {"workers": 2, "global_limit": 2, "rate_limit": "100/m"},
    "emails": {"workers": 1},
}


def paused_at(name: str) -> Any:
    return Queue.objects.filter(name=name).values_list("paused_at", flat=True).first()


def test_jobs_pause_pauses_the_queue_and_says_how_to_resume_it() -> None:
    out = jobs("pause", "emails")
    assert (
        out == "queue emails paused; running jobs finish, none start until `jobs resume emails`\n"
    )
    assert paused_at("emails") == START
    assert paused_at("default") is None


def test_jobs_pause_of_a_paused_queue_says_so_and_keeps_since_when() -> None:
    pause_queue("emails", now=START - HOUR)
    assert jobs("pause", "emails") == "queue emails was paused already\n"  # no CommandError: 0
    assert paused_at("emails") == START - HOUR


def test_jobs_resume_serves_a_paused_queue_and_says_when_it_was_not_paused() -> None:
    pause_queue("emails", now=START - HOUR)
    assert jobs("resume", "emails") == "queue emails resumed; its workers start its jobs again\n"
    assert paused_at("emails") is None
    assert jobs("resume", "emails") == "queue emails was not paused\n"
    assert jobs("resume", "never-paused") == "queue never-paused was not paused\n"


def test_jobs_pause_and_resume_give_one_json_document() -> None:
    assert jobs_json("pause", "emails") == {"queue": "emails", "result": "paused"}
    assert jobs_json("pause", "emails") == {"queue": "emails", "result": "paused_already"}
    assert jobs_json("resume", "emails") == {"queue": "emails", "result": "resumed"}
    assert jobs_json("resume", "emails") == {"queue": "emails", "result": "not_paused"}


@pytest.mark.parametrize("verb", ["pause", "resume"])
@pytest.mark.parametrize("name", ["", "q" * 101])
def test_jobs_pause_and_resume_refuse_a_name_no_queue_can_have(verb: str, name: str) -> None:
    with pytest.raises(ValueError) as refused:
        pause_queue(name)
    with pytest.raises(CommandError) as failed:
        jobs(verb, name)
    assert str(failed.value) == str(refused.value)
    assert "queue" in str(failed.value)
    assert not Queue.objects.exists()


def test_jobs_pause_of_a_queue_named_nowhere_is_refused_with_the_closest() -> None:
    with pytest.raises(CommandError) as refused:
        jobs("pause", "emial")
    assert str(refused.value) == (
        "queue 'emial' is not in DJANGO_JOBS['QUEUES'] and no registered job, schedule or "
        "task backend uses it (did you mean 'emails'?), and no job is on it: pause it anyway "
        "with force=True (`manage.py jobs pause emial --force`)"
    )
    assert not Queue.objects.exists()  # nothing paused
    with pytest.raises(ValueError, match="did you mean 'emails'"):
        pause_queue("emial")
    assert jobs("pause", "emial", "--force").startswith("queue emial paused")
    assert paused_at("emial") == START


def test_jobs_pause_of_a_queue_that_has_jobs_needs_no_force(make_job: MakeJob) -> None:
    make_job(queue="backfill")  # scheduled onto a queue the settings do not name
    assert pause_queue("backfill") is True


def test_jobs_status_says_which_queue_is_paused_since_when(make_job: MakeJob) -> None:
    make_job(queue="emails")
    pause_queue("emails", now=START - HOUR)
    with override_settings(DJANGO_JOBS={"QUEUES": PLAIN}):
        text = jobs("status")
        queues = by_queue(jobs_json("status"))
    assert (
        "Queue emails: paused since 2026-01-05 11:00:00 UTC, none of its jobs start until "
        "`jobs resume emails`." in text.splitlines()
    )
    assert "Queue default" not in text
    assert queues["emails"]["paused"] is True
    assert queues["emails"]["paused_at"] == (START - HOUR).isoformat()
    assert (queues["default"]["paused"], queues["default"]["paused_at"]) == (False, None)


def test_jobs_status_lists_a_paused_queue_without_jobs() -> None:
    pause_queue("quiet", now=START, force=True)  # a queue named nowhere
    with override_settings(DJANGO_JOBS={"QUEUES": PLAIN}):
        assert sorted(by_queue(jobs_json("status"))) == ["default", "emails", "quiet"]


def test_jobs_status_shows_the_limits_and_the_slots_in_use(make_job: MakeJob) -> None:
    make_job(status=JobStatus.RUNNING, lease_owner="w", lease_expires_at=START + HOUR)
    make_job(status=JobStatus.RUNNING, lease_owner="w", lease_expires_at=START - HOUR)  # lapsed
    with override_settings(DJANGO_JOBS={"QUEUES": LIMITED}):
        text = jobs("status")
        queues = by_queue(jobs_json("status"))
    assert (
        "Queue default: limits: global limit 2, 100 per minute (1 of 2 slots in use)."
        in text.splitlines()
    )
    assert "Queue emails" not in text
    assert queues["default"]["limits"] == {
        "global_limit": 2,
        "rate": {"jobs": 100, "seconds": 60},
        "keyed": False,
    }
    assert (queues["default"]["running"], queues["default"]["slots_in_use"]) == (2, 1)
    assert queues["emails"]["limits"] is None


def test_jobs_status_says_a_keyed_queue_limits_per_key(make_job: MakeJob) -> None:
    make_job(name="tests.keyed", queue="keyed", concurrency_key="a", concurrency_limit=1)
    pause_queue("keyed", now=START)
    with override_settings(DJANGO_JOBS={"QUEUES": PLAIN}):
        text = jobs("status")
        queues = by_queue(jobs_json("status"))
    assert (
        "Queue keyed: paused since 2026-01-05 12:00:00 UTC, none of its jobs start until "
        "`jobs resume keyed`; limits: per key." in text.splitlines()
    )
    assert queues["keyed"]["limits"] == {"global_limit": None, "rate": None, "keyed": True}
