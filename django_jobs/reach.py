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

import ast
import sys
from collections.abc import Callable, Collection
from pathlib import Path
from typing import NamedTuple

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


#: Folders of an app whose modules no process imports to serve it.
NOT_SERVED = frozenset({"migrations", "static", "templates", "locale", "node_modules"})


#: Where ``job`` is imported from.
JOB_MODULES = ("django_jobs", "django_jobs.registry")


class Declared(NamedTuple):
    """A ``@job`` read from a module's source: its name, module, file and line."""

    name: str
    module: str
    path: Path
    line: int


def unimported_declarations() -> list[Declared]:
    """The ``@job`` declarations in the modules of the project's own apps (those outside
    site-packages) that nothing has imported by now, read from their source, not run:
    a view that imports its module inside the view function, say. Once the apps are
    loaded and the URLconf imported, such a module is imported only when that code runs,
    and never by ``runjobs``; an installed app's ``jobs`` module (which ``runjobs``
    imports) and test modules are left out."""
    found: list[Declared] = []
    on_demand = app_modules("jobs")
    for app in apps.get_app_configs():
        root = Path(app.path)
        if app.name == "django_jobs" or not root.is_dir() or installed_package(root):
            continue
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if NOT_SERVED.intersection(parts) or "__pycache__" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            module = ".".join((app.name, *parts))
            if module in sys.modules or module in on_demand or is_test_module(module):
                continue
            found += declarations(path, module)
    return found


def installed_package(root: Path) -> bool:
    """Whether ``root`` lies in an environment's packages, not in the project."""
    return any(part in {"site-packages", "dist-packages"} for part in root.parts)


def declarations(path: Path, module: str) -> list[Declared]:
    """The ``@job("name")`` declarations of ``path``'s source, ``job`` imported from
    django_jobs (under any name); none if it cannot be read or parsed."""
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    if "django_jobs" not in source:
        return []
    try:
        tree = ast.parse(source, str(path))
    except (SyntaxError, ValueError):
        return []
    names, packages = job_aliases(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            target = call.func if call is not None else decorator
            is_job = (isinstance(target, ast.Name) and target.id in names) or (
                isinstance(target, ast.Attribute)
                and target.attr == "job"
                and isinstance(target.value, ast.Name)
                and target.value.id in packages
            )
            if is_job:
                found.append(
                    Declared(declared_name(call, node.name), module, path, decorator.lineno)
                )
    return found


def job_aliases(tree: ast.Module) -> tuple[set[str], set[str]]:
    """The names ``job`` goes by in a module (``from django_jobs import job as j``), and
    the names the package goes by (``import django_jobs as dj``)."""
    names: set[str] = set()
    packages: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in JOB_MODULES:
            names.update(alias.asname or alias.name for alias in node.names if alias.name == "job")
        elif isinstance(node, ast.Import):
            packages.update(
                alias.asname or alias.name for alias in node.names if alias.name == "django_jobs"
            )
    return names, packages


def declared_name(call: ast.Call | None, function: str) -> str:
    """The job's name as the decorator gives it (a literal), else its function's name."""
    if call is not None:
        given = call.args[0] if call.args else None
        given = given or next((k.value for k in call.keywords if k.arg == "name"), None)
        if isinstance(given, ast.Constant) and isinstance(given.value, str):
            return given.value
    return function
