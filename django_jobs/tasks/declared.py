"""The tasks a project declares: the only paths a task's job row may name.

A row names its task by module path, and whoever can write a row (the admin's
schedule form, a hand-written insert) chooses that path. So the path is checked
before anything is imported. It resolves when it is

- a task declared in this process: Django's ``Task`` calls its backend's
  ``validate_task`` as ``@task`` makes it, and ``JobsBackend.validate_task``
  records its path here (its module is imported already) if it is made while
  the apps load, as it is in every worker too (or in a test module); or
- in a module the project allows: each installed app's ``tasks`` module, and
  those its backend's ``OPTIONS["MODULES"]`` lists. That module is imported,
  and the path must then name a ``Task``.

Anything else is refused with :class:`ValueError`, and nothing is imported.

A worker makes a task only where it imports its module: as the apps load, or
on demand from an allowed module (see :mod:`django_jobs.reach`). So
``JobsBackend`` refuses a task made after start-up outside the allowed modules
(:func:`require_reached`) with Django's ``InvalidTask`` as ``@task`` makes it, and
each time it is enqueued: its rows would reach workers that never make it.
``schedule_job()`` of the path of a task made here whose module is no longer
allowed says the same (:func:`made_here_but_refused`).

A declared path whose import now fails (the module or the task was moved or
renamed) resolves to a stand-in ``Task`` under the same path that raises that
error when called: its job fails as the import did, and its result still reads.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Collection
from importlib import import_module
from importlib.util import find_spec
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from ..exceptions import PermanentFailure
from ..reach import app_modules, reached
from ..registry import names_changed
from .framework import InvalidTask, Task, task_backends

logger = logging.getLogger(__name__)

#: The module paths of the tasks made for a ``JobsBackend`` in this process, with the alias
#: each was made for.
_made: dict[str, str] = {}
#: Those of them a worker makes too, whatever their module: made while the apps loaded
#: (or in a test module, whose worker runs in its process; see :mod:`django_jobs.reach`).
_declared: set[str] = set()


#: Set on a stand-in's function: the path it stands for is not declared by it.
STAND_IN = "django_jobs_stand_in"


def declare(task: Task) -> None:
    """Record ``task``'s path: this process made it. Rows may name it if a worker makes it
    too, or when its module is allowed (:func:`may_name`)."""
    if getattr(task.func, STAND_IN, False):
        return
    path = task.module_path
    _made[path] = task.backend
    if reached(path.rpartition(".")[0], frozenset):
        _declared.add(path)
    names_changed()  # new, or its module imported again: a name workers may know now


def require_reached(task: Task, backend: str, listed: Collection[str]) -> None:
    """:class:`InvalidTask`, saying how to declare it, for a task a worker of ``backend``
    (whose ``MODULES`` are ``listed``) does not import: made after start-up, outside the
    installed apps' ``tasks`` modules and ``listed``."""
    path = task.module_path
    if path in _declared:
        return
    if not reached(path.rpartition(".")[0], lambda: app_modules("tasks") | set(listed)):
        raise InvalidTask(refusal(path, backend))


def declared_names() -> list[str]:
    """The paths of the tasks made in this process that rows may name, whose modules are
    imported."""
    return sorted(
        path for path in list(_made) if path.rpartition(".")[0] in sys.modules and may_name(path)
    )


def made_here_but_refused(path: str) -> str | None:
    """Why rows may not name ``path``, a task made in this process whose module is no longer
    allowed (:func:`refusal`); None for any other path."""
    backend = _made.get(path)
    return None if backend is None or may_name(path) else refusal(path, backend)


def import_task_modules() -> None:
    """Import every module a task may live in (:func:`allowed_modules`, of every alias) that
    exists (an installed app's ``tasks``; a module ``MODULES`` lists must), so that its tasks
    are declared: a worker does so as it starts, and then claims the jobs of those tasks (and
    of no other path). One that fails to import is logged and passed over: its tasks' jobs
    wait for a worker that declares them."""
    try:
        aliases = list(task_backends)
    except ImproperlyConfigured:
        return
    modules = sorted({module for alias in aliases for module in allowed_modules(alias)})
    apps_modules = app_modules("tasks")
    for module in modules:
        if module in sys.modules or (module in apps_modules and not exists(module)):
            continue  # imported already, or an app without tasks (a listed one must import)
        try:
            import_module(module)
        except Exception as exc:  # whatever the module raised as it was imported
            logger.warning(
                "task module %r cannot be imported (%s: %s): its tasks' jobs wait for a"
                " worker that can",
                module,
                type(exc).__name__,
                exc,
                extra={"event": "task_module_not_imported", "task_module": module},
            )


def exists(module: str) -> bool:
    """Whether ``module`` can be found (its package is imported to look, not it)."""
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):  # its package is missing, or not a package
        return False


def is_module_name(name: Any) -> bool:
    return isinstance(name, str) and all(part.isidentifier() for part in name.split("."))


def allowed_modules(backend: str) -> set[str]:
    """Every installed app's ``tasks`` module, and the modules ``backend``'s ``MODULES`` lists."""
    modules = app_modules("tasks")
    try:
        listed: Collection[str] = getattr(task_backends[backend], "task_modules", ())
    except ImproperlyConfigured:  # not a configured alias: Task.using() says so afterwards
        listed = ()
    return modules | set(listed)


def is_declared(path: str) -> bool:
    return path in _declared and path.rpartition(".")[0] in sys.modules


def may_name(path: str) -> bool:
    """Whether ``path`` may name a task for some alias of ``TASKS``: nothing is imported."""
    if is_declared(path):
        return True
    module = path.rpartition(".")[0]
    try:
        aliases = list(task_backends)
    except ImproperlyConfigured:  # a TASKS setting Django refuses: no alias allows anything
        return False
    return bool(module) and any(module in allowed_modules(alias) for alias in aliases)


class TaskRefused(PermanentFailure, ValueError):
    """A task whose module the project does not declare: no attempt of its job can pass
    until a deploy declares it, so the job is dead-lettered at once."""


def refusal(path: str, backend: str) -> str:
    module = path.rpartition(".")[0]
    return (
        f"task {path!r} is refused: {module!r} is neither an installed app's tasks module nor "
        f"listed in TASKS[{backend!r}]['OPTIONS']['MODULES'] (define the task in an installed "
        "app's tasks.py, or list its module there)"
    )


def resolve_task(path: str, backend: str, queue: str = "default") -> Task:
    """The ``Task`` at ``path`` (``module.name``) if the project declares it, else ``ValueError``.

    Nothing is imported before the check; see the module's text. A path whose
    import fails gives :func:`stand_in`.
    """
    if not is_declared(path) and path.rpartition(".")[0] not in allowed_modules(backend):
        raise TaskRefused(refusal(path, backend))
    try:
        found = import_string(path)
    except Exception as exc:  # ImportError, or whatever the module raised as it was imported
        return stand_in(path, backend, queue, exc)
    if not isinstance(found, Task):
        raise ValueError(f"{path!r} is not a task (decorate it with @task)")
    return found


def stand_in(path: str, backend: str, queue: str, error: BaseException) -> Task:
    """A ``Task`` under ``path`` on ``queue`` that raises ``error`` when called (it is not
    declared: the path stays as the project declares it)."""
    module, _, name = path.rpartition(".")

    def missing(*args: Any, **kwargs: Any) -> Any:
        raise error

    missing.__module__, missing.__qualname__, missing.__name__ = module, name, name
    setattr(missing, STAND_IN, True)
    return Task(func=missing, backend=backend, queue_name=queue)
