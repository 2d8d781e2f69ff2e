"""A module no task lives in: importing it leaves a trace, for the tests that a worker
never imports a module a job row names unless the project allows it."""

from __future__ import annotations

from tests.support.tasks import IMPORTED

IMPORTED.append(__name__)


def not_a_task() -> str:
    return "a plain function"
