"""Which modules a worker imports: a ``@job`` or a ``@task`` made anywhere else is not
made in the worker, which does not claim its jobs: they wait for a worker that knows them.

``runjobs`` imports what the apps import as they load (``django.setup()``): every
installed app's models and ``jobs`` module (``django_jobs``' ``ready()`` imports them),
what an app's ``ready()`` imports, and whatever those modules import in turn. So a
registration made while the apps load is made in every worker too; one made after they
are ready, by a module a view imports (inside the view, or at the top of a module only the
URLconf imports), exists only in the process that imported it.

A module a worker imports on demand (an installed app's ``jobs`` module; for tasks, the
modules :mod:`.tasks.declared` allows) is reached whenever it is imported. So is a test
module: the worker of a test runs in the test's own process.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from django.apps import apps


def reached(module: str, on_demand: Callable[[], Collection[str]]) -> bool:
    """Whether a worker imports ``module``, a registration's, made now: True while the apps
    load, for a module of ``on_demand()`` (those a worker imports when it needs them), and
    for a test module."""
    if not apps.ready or is_test_module(module):
        return True
    return module in on_demand()


def is_test_module(module: str) -> bool:
    """A module of a test suite: ``tests``, ``shop.tests.test_views``, ``conftest``, ..."""
    return any(
        part in {"test", "tests", "conftest"} or part.startswith("test_") or part.endswith("_tests")
        for part in module.split(".")
    )


def app_modules(name: str) -> set[str]:
    """Every installed app's module ``name`` (``shop.jobs``), imported or not."""
    return {f"{app.name}.{name}" for app in apps.get_app_configs()}
