"""Example tasks of Django's Tasks framework, run by ``JobsBackend`` (see settings.TASKS)."""

from __future__ import annotations

from django_jobs.tasks.framework import task


@task()
def noop(n: int) -> None:
    """Does nothing: what ``bench/enqueue.py`` enqueues."""


@task(queue_name="emails")
def send_welcome(email: str) -> str:
    return f"welcome mail to {email}"
