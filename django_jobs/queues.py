"""The queues a project names, and what is said of a queue it names nowhere.

A job can be scheduled onto any queue, and a worker serves any queue it is
told to; a queue that ``QUEUES``, no registered job, no ``RECURRING`` entry
and no ``TASKS`` backend names is most likely a typo (``"emial"``), whose
jobs would wait for a worker that never comes. ``schedule_job()`` warns of it
(or refuses it, with ``DJANGO_JOBS["UNKNOWN_QUEUES"] = "error"``),
``pause_queue()`` refuses it unless forced, and ``runjobs --queue`` warns of it,
each with the closest queue the project does name.
"""

from __future__ import annotations

import difflib
import logging
import threading
from collections.abc import Mapping
from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from .conf import runs_tasks, settings
from .registry import get_definition, registered_names

logger = logging.getLogger(__name__)

_warned: set[str] = set()
_warned_lock = threading.Lock()


def known_queues() -> set[str]:
    """The queues the project names: ``QUEUES``, the registered jobs' own, the ``RECURRING``
    entries' ``queue`` and the ``QUEUES`` of a ``TASKS`` backend that runs on django-jobs."""
    known = set(settings.QUEUES)
    known.update(get_definition(name).queue for name in registered_names())
    for options in settings.RECURRING.values():
        if isinstance(options, Mapping) and isinstance(options.get("queue"), str):
            known.add(options["queue"])
    for params in (getattr(django_settings, "TASKS", None) or {}).values():
        if runs_tasks(params):
            known.update(queue for queue in params.get("QUEUES", []) if isinstance(queue, str))
    return known


def unknown_queue(name: str) -> str | None:
    """``None`` if the project names queue ``name``; else the sentence that says it does
    not, with the closest queue it does name."""
    if name in settings.QUEUES:
        return None
    known = known_queues()
    if name in known:
        return None
    close = difflib.get_close_matches(name, sorted(known), n=1)
    guess = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"queue {name!r} is not in DJANGO_JOBS['QUEUES'] and no registered job, schedule or "
        f"task backend uses it{guess}"
    )


def check_scheduled_queue(name: str, default: str) -> None:
    """Said when a job is scheduled onto queue ``name`` (its job's own queue being
    ``default``): a warning, once per queue and process, or :class:`ValueError` with
    ``DJANGO_JOBS["UNKNOWN_QUEUES"] = "error"``."""
    if name == default:
        return  # the job's own queue: named by its declaration
    problem = unknown_queue(name)
    if problem is None:
        return
    if settings.UNKNOWN_QUEUES == "error":
        raise ValueError(
            f"{problem}: refused, as DJANGO_JOBS['UNKNOWN_QUEUES'] is 'error'; add it to "
            "DJANGO_JOBS['QUEUES'] to schedule onto it"
        )
    with _warned_lock:
        if name in _warned:
            return
        _warned.add(name)
    logger.warning(
        "%s: scheduled anyway; only a worker started with --queue %s runs its jobs",
        problem,
        name,
        extra={"event": "unknown_queue_scheduled", "queue": name},
    )


@receiver(setting_changed)
def forget_warnings(**kwargs: Any) -> None:
    """Warn again of every queue once the settings change (the tests do)."""
    with _warned_lock:
        _warned.clear()
