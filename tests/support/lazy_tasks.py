"""Tasks in a module nothing imports at start-up: a worker imports it when a row names one
of them and the project allows it (``OPTIONS["MODULES"]``)."""

from __future__ import annotations

from django_jobs.tasks.framework import task
from tests.support.tasks import IMPORTED

IMPORTED.append(__name__)


@task()
def double(n: int) -> int:
    return 2 * n
