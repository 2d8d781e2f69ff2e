"""The ``@job`` decorator and the registry that maps job names to handlers.

A worker resolves a row's job name only through this registry: it never
imports a path stored in the database. A name no ``@job`` registered is put
to the finders (:func:`add_finder`) before it is unknown: a package that
names its jobs itself (Django tasks, by their module paths) resolves them
there, on its own rules, instead of registering each one up front.
"""

from __future__ import annotations

import difflib
import inspect
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from asgiref.sync import iscoroutinefunction
from django.core.signals import setting_changed
from django.dispatch import receiver

from .conf import (
    JOB_NAME_MAX_LENGTH,
    concurrency_problem,
    parse_rate,
    refuse,
    require_max_attempts,
    require_priority,
    require_queue_name,
    require_text,
    settings,
)
from .exceptions import DuplicateJobName, UnknownJob
from .reach import app_modules, reached

if TYPE_CHECKING:
    from .db.records import QueueLimits

#: Called as ``handler(ctx, payload)``, ``ctx`` a :class:`~django_jobs.context.JobContext`
#: (checked when it is declared, :func:`require_handler`).
Handler = Callable[..., Any]
H = TypeVar("H", bound=Callable[..., Any])

logger = logging.getLogger(__name__)

ATTRIBUTE = "django_job"


@dataclass(frozen=True)
class JobDefinition:
    name: str
    func: Handler
    queue: str = "default"
    priority: int = 0
    max_attempts: int | None = None
    timeout: float | None = None
    #: ``@job(concurrency=N)``: at most N jobs of this queue with the same concurrency key
    #: (the job's name unless ``schedule_job()`` gives one) run at once, on every worker.
    concurrency: int | None = None
    #: Why no job of this name can be enqueued now, though its rows still run (and fail):
    #: a task whose module no longer imports, say.
    unavailable: str | None = None

    @cached_property
    def is_async(self) -> bool:
        """The handler is a coroutine function: a worker runs it on its event loop."""
        return iscoroutinefunction(self.func)

    @property
    def func_path(self) -> str:
        return f"{self.func.__module__}.{self.func.__qualname__}"

    def concurrency_key(self, key: str | None, queue: str) -> str | None:
        """The concurrency key a new job of this definition on ``queue`` carries: ``key``,
        else the job's name, for a job with a concurrency limit; None for one without."""
        if self.concurrency is None:
            if key is not None:
                raise ValueError(
                    f"concurrency_key is given, but job {self.name!r} has no concurrency "
                    f"limit: declare one, as @job({self.name!r}, concurrency=1)"
                )
            return None
        if queue not in keyed_queues():
            raise ValueError(
                f"job {self.name!r} has a concurrency limit, which its workers hold on "
                f"queues that a job with a limit declares ({self.queue!r}); queue {queue!r} "
                "has none: schedule it there, or declare a job with concurrency= on that queue"
            )
        return self.name if key is None else key


@dataclass(frozen=True)
class Finder:
    """Job names a package resolves itself: ``find(name)`` gives the definition or None
    (nothing of the name's is imported unless the package allows it); ``names()`` those
    it knows of now, for the admin's filters and ``did you mean``."""

    find: Callable[[str], JobDefinition | None]
    names: Callable[[], Iterable[str]]
    #: Make every name the finder would resolve one of ``names()`` (import the modules
    #: its names live in), as a worker does when it starts (:func:`discover_names`).
    discover: Callable[[], None] | None = None


_registry: dict[str, JobDefinition] = {}
_limits: dict[str, QueueLimits | None] = {}  # queue_limits(), by queue
# Each queue's ``timeout`` option in seconds, read once until the settings change: every
# attempt asks, and reading it through the settings cost a busy worker 2 % of its time.
_timeouts: dict[str, float | None] = {}
_finders: dict[str, Finder] = {}
#: The jobs registered from a module a worker does not import (see :mod:`.reach`): name ->
#: that module.
_unreached: dict[str, str] = {}
_lock = threading.Lock()
#: Bumped whenever the names known may have changed (:func:`names_changed`).
_generation = 0
#: :func:`known_names` as of a generation.
_known: tuple[int, tuple[str, ...]] | None = None


def _seconds(timeout: float | timedelta | None) -> float | None:
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    if seconds <= 0:
        raise ValueError(f"timeout must be positive, got {timeout!r}")
    return seconds


def job(
    name: str,
    *,
    queue: str = "default",
    priority: int = 0,
    max_attempts: int | None = None,
    timeout: float | timedelta | None = None,
    concurrency: int | None = None,
) -> Callable[[H], H]:
    """Register the decorated function as the handler of job ``name``.

    The name is what the database stores, so renaming the function does not
    orphan queued jobs. The handler is called as ``handler(ctx, payload)``.
    With ``concurrency``, at most that many jobs of the name (or of one
    ``concurrency_key`` given to ``schedule_job()``) run at once across every
    worker (docs/how-to/flow-control.md).
    """
    require_text(name, "a job name", JOB_NAME_MAX_LENGTH)
    require_queue_name(queue)
    if max_attempts is not None:
        require_max_attempts(max_attempts)
    require_priority(priority)
    seconds = _seconds(timeout)
    if concurrency is not None:
        refuse("concurrency", concurrency_problem(concurrency), concurrency)

    def decorator(func: H) -> H:
        require_handler(name, func)
        definition = JobDefinition(
            name, func, queue, priority, max_attempts, seconds, concurrency=concurrency
        )
        register(definition)
        setattr(func, ATTRIBUTE, definition)
        return func

    return decorator


def require_handler(name: str, func: Callable[..., Any]) -> None:
    """``TypeError`` unless ``func`` can be called as ``handler(ctx, payload)``: said when the
    job is declared, not by each of its jobs' attempts. A callable whose signature Python
    cannot read (some built-ins) is taken as it is."""
    if not callable(func):
        raise TypeError(f"job {name!r}: its handler must be callable, got {func!r}")
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None, None)
    except TypeError:
        where = getattr(func, "__qualname__", repr(func))
        own_name = getattr(func, "__name__", "handler")
        fix = (
            "lambda ctx, payload: ..."
            if own_name == "<lambda>"
            else f"def {own_name}(ctx, payload)"
        )
        raise TypeError(
            f"job {name!r}: its handler {where}{signature} cannot be called as "
            f"handler(ctx, payload), the two arguments every handler is given: write it as "
            f"{fix}"
        ) from None


def register(definition: JobDefinition) -> None:
    """Register ``definition``; one made from a module a worker does not import is
    recorded (:func:`unreached_jobs`) and said once, as it is made."""
    with _lock:
        existing = _registry.get(definition.name)
        if existing is not None and existing.func_path != definition.func_path:
            raise DuplicateJobName(
                f"job name {definition.name!r} is already registered to "
                f"{existing.func_path}; cannot register {definition.func_path} too"
            )
        _registry[definition.name] = definition
        _limits.clear()
        module = _newly_unreached(definition)
    names_changed()
    if module is None:
        return
    logger.warning(
        "job %r is registered by %s, a module imported after start-up: `runjobs` does not "
        "import it, so its jobs wait for a worker that knows it; define it in an installed "
        "app's jobs.py, or import %s from there",
        definition.name,
        module,
        module,
        extra={"event": "late_job_registered", "job": definition.name, "job_module": module},
    )


def _newly_unreached(definition: JobDefinition) -> str | None:
    """The module of ``definition``'s handler if a worker does not import it and it was
    not recorded yet; None otherwise. Called under the lock."""
    module = definition.func.__module__
    if reached(module, lambda: app_modules("jobs")):
        _unreached.pop(definition.name, None)
        return None
    if _unreached.get(definition.name) == module:
        return None
    _unreached[definition.name] = module
    return module


def unreached_jobs() -> list[tuple[str, str]]:
    """The jobs registered from a module a worker does not import, with that module."""
    with _lock:
        return sorted(_unreached.items())


def keyed_queues() -> frozenset[str]:
    """The queues of the registered jobs with a concurrency limit: their workers claim
    under keys."""
    with _lock:
        return frozenset(d.queue for d in _registry.values() if d.concurrency is not None)


def queue_limits(queue: str) -> QueueLimits | None:
    """What limits the claims of ``queue`` across every worker (its ``global_limit`` and
    ``rate_limit`` options, its jobs' concurrency keys); None when nothing does.

    Read on every claim: worked out once per queue, again after a registration or a
    change of ``DJANGO_JOBS``."""
    try:
        return _limits[queue]
    except KeyError:
        limits = _limits[queue] = _queue_limits(queue)
        return limits


def _queue_limits(queue: str) -> QueueLimits | None:
    limit = settings.queue_option(queue, "global_limit")
    rate = settings.queue_option(queue, "rate_limit")
    keyed = queue in keyed_queues()
    if limit is None and rate is None and not keyed:
        return None
    from .db.records import QueueLimits, Rate  # the models: once the apps are ready

    return QueueLimits(
        global_limit=None if limit is None else int(limit),
        rate=None if rate is None else Rate(*parse_rate(rate)),
        keyed=keyed,
    )


@receiver(setting_changed)
def _forget_queue_options(setting: str, **kwargs: Any) -> None:
    if setting == "DJANGO_JOBS":
        _limits.clear()
        _timeouts.clear()


def unregister(name: str) -> None:
    with _lock:
        _registry.pop(name, None)
        _unreached.pop(name, None)
        _limits.clear()
    names_changed()


def add_finder(key: str, finder: Finder) -> None:
    """Put the names no ``@job`` registered to ``finder`` too; once per ``key``."""
    with _lock:
        _finders[key] = finder
    names_changed()


def _found(name: str) -> JobDefinition | None:
    with _lock:
        finders = list(_finders.values())
    for finder in finders:
        definition = finder.find(name)
        if definition is not None:
            return definition
    return None


def names_changed() -> None:
    """Say that the names known may have changed (a registration, a finder's new name):
    :func:`known_names` reads them again."""
    global _generation
    with _lock:
        _generation += 1


def known_names() -> tuple[str, ...]:
    """The names a worker in this process runs, the package's own included: those of
    :func:`registered_names`. Read again only after :func:`names_changed` (the registry
    only grows while a worker runs): a worker's claims ask for it each time, and bind it."""
    global _known
    known, generation = _known, _generation
    if known is None or known[0] != generation:
        known = _known = (generation, tuple(registered_names()))
    return known[1]


def async_names() -> tuple[str, ...]:
    """Those of :func:`known_names` whose handlers are coroutine functions: the names a
    worker's event loop claims (the same tuple until the registry grows)."""
    return _split_names()[1]


def sync_names() -> tuple[str, ...]:
    """Those of :func:`known_names` whose handlers run on threads."""
    return _split_names()[0]


#: :func:`known_names` split by the kind of handler, as of a generation.
_split: tuple[int, tuple[str, ...], tuple[str, ...]] | None = None


def _split_names() -> tuple[tuple[str, ...], tuple[str, ...]]:
    global _split
    split, generation = _split, _generation
    if split is None or split[0] != generation:
        sync: list[str] = []
        coroutines: list[str] = []
        for name in known_names():
            try:
                is_async = get_definition(name).is_async
            except UnknownJob:  # gone since it was listed: the next generation says so
                is_async = False
            (coroutines if is_async else sync).append(name)
        split = _split = (generation, tuple(sync), tuple(coroutines))
    return split[1], split[2]


def discover_names() -> None:
    """Have each finder make known the names it would resolve (:attr:`Finder.discover`):
    what a worker does as it starts, so that its claims take the jobs of every name it can
    run."""
    with _lock:
        finders = list(_finders.values())
    for finder in finders:
        if finder.discover is not None:
            finder.discover()


def get_definition(job: str | Callable[..., Any]) -> JobDefinition:
    """The definition for a job name or a decorated function; :class:`UnknownJob` if none."""
    if callable(job) and not isinstance(job, str):
        definition = getattr(job, ATTRIBUTE, None)
        if not isinstance(definition, JobDefinition):
            raise UnknownJob(f"{job!r} is not a registered job: decorate it with @job(name)")
        return definition
    if not isinstance(job, str):
        raise UnknownJob(f"a job is a registered name or @job function, not {job!r}")
    definition = _registry.get(job) or _found(job)
    if definition is None:
        raise UnknownJob(
            f"no job is registered under the name {job!r}{_suggest(job) or '.'} {HOW_TO_REGISTER}"
        )
    return definition


@dataclass(frozen=True)
class Runnable:
    """What a claimed job needs from the registry before it runs (:func:`runnable`)."""

    #: Its definition, or the :class:`UnknownJob` its attempt fails with.
    definition: JobDefinition | UnknownJob
    #: Its ``@job(timeout=...)``, else its queue's ``timeout`` option; None: none.
    timeout: float | None


def runnable(name: str, queue: str) -> Runnable:
    """The definition and the timeout of a claimed job of ``name`` on ``queue``, looked up
    once per attempt. A bad ``timeout`` setting raises here (the attempt fails with it)."""
    try:
        definition: JobDefinition | UnknownJob = get_definition(name)
    except UnknownJob as exc:
        definition = exc
    timeout = definition.timeout if isinstance(definition, JobDefinition) else None
    return Runnable(definition, timeout if timeout is not None else queue_timeout(queue))


def queue_timeout(queue: str) -> float | None:
    """``queue``'s ``timeout`` option in seconds, None if it has none; a bad one raises
    each time it is asked (never kept)."""
    try:
        return _timeouts[queue]
    except KeyError:
        timeout = _timeouts[queue] = settings.queue_timeout(queue)
        return timeout


#: How a name comes to be known, as an unknown name's error says it.
HOW_TO_REGISTER = (
    "A job is registered by decorating its handler with @job(name) in an installed app's"
    " jobs.py (which runjobs imports as it starts); a task, by defining it in an installed"
    " app's tasks.py or listing its module in TASKS[alias]['OPTIONS']['MODULES']."
)


def _suggest(name: str) -> str:
    """``; did you mean ...?`` naming the closest registered names, or nothing."""
    close = difflib.get_close_matches(name, user_names(), n=3)
    if not close:
        return ""
    return f"; did you mean {' or '.join(repr(match) for match in close)}?"


#: The package's own job names (the tasks' older runner, ``django_jobs.task``): registered so
#: that their rows run, never enqueued by a project, so no list offers them.
INTERNAL_PREFIX = "django_jobs."


def user_names() -> list[str]:
    """The registered names a project enqueues: every one but the package's own."""
    return [name for name in registered_names() if not name.startswith(INTERNAL_PREFIX)]


def registered_names() -> list[str]:
    """Every ``@job`` name, and the names the finders know of now."""
    with _lock:
        names = set(_registry)
        finders = list(_finders.values())
    for finder in finders:
        names.update(finder.names())
    return sorted(names)
