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
# Queues found named, outside QUEUES (another job's, a schedule's): schedule_job() onto one
# does not work the known queues out again. The registry only grows, so a name stays known
# until the settings change.
_named: set[str] = set()
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
    if name in settings.QUEUES or name in _named:
        return None
    known = known_queues()
    if name in known:
        _named.add(name)
        return None
    close = closest_queue(name, known)
    guess = f" (did you mean {close!r}?)" if close else ""
    return (
        f"queue {name!r} is not in DJANGO_JOBS['QUEUES'] and no registered job, schedule or "
        f"task backend uses it{guess}"
    )


def closest_queue(name: str, known: set[str]) -> str | None:
    """The queue of ``known`` whose name is closest to ``name`` (a typo's), if any is close."""
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return close[0] if close else None


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
    """Warn again of every queue, and work the known ones out again, once the settings
    change (the tests do)."""
    with _warned_lock:
        _warned.clear()
        _named.clear()
