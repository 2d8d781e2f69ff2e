"""Jobs and tasks a worker never imports are said where they are made, not by its retries.

A ``@job`` made after start-up, by a module a view imports, exists in the web process
only: ``runjobs`` never imports that module, and each of its jobs would wait, pending, for
a worker that knows it. The modules here are written into a temporary directory: a
project's own, which the rule treats as a user's (the test suite's own modules count as
reached).
"""

from __future__ import annotations

import importlib
import io
import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.apps import apps
from django.core.management import call_command
from django.test import override_settings

from django_jobs.checks import check_jobs_reached
from django_jobs.models import Job
from django_jobs.registry import ATTRIBUTE, get_definition, register, unreached_jobs, unregister

pytestmark = pytest.mark.django_db

HELPERS = """
from django_jobs import job


@job("store.sync")
def sync(ctx, payload):
    return payload
"""

VIEWS = """
from django.http import JsonResponse

from django_jobs import schedule_job


def sync(request):
    from store.helpers import sync  # imported lazily, on the first request

    return JsonResponse({"job": schedule_job(sync, {"n": 1}).pk})
"""

URLS = """
from django.urls import path

from store import views

urlpatterns = [path("sync/", views.sync)]
"""


def late_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == "late_job_registered"]


def w006(messages: list[Any]) -> list[str]:
    return [message.msg for message in messages if message.id == "django_jobs.W006"]


# -- a job registered after start-up ----------------------------------------------------


def test_reach_job_a_view_imports_lazily_is_said_once_as_it_registers(
    project_module, client, caplog
):
    project_module("store.helpers", HELPERS)
    project_module("store.views", VIEWS)
    project_module("store.urls", URLS)
    with override_settings(ROOT_URLCONF="store.urls"), caplog.at_level(logging.WARNING):
        first = client.get("/sync/")
        again = client.get("/sync/")
    assert (first.status_code, again.status_code) == (200, 200)
    assert Job.objects.filter(name="store.sync").count() == 2  # the web process enqueues it
    [record] = late_records(caplog)
    assert record.levelno == logging.WARNING and record.name == "django_jobs.registry"
    assert record.getMessage() == (
        "job 'store.sync' is registered by store.helpers, a module imported after start-up: "
        "`runjobs` does not import it, so its jobs wait for a worker that knows it; define it "
        "in an installed app's jobs.py, or import store.helpers from there"
    )
    assert (record.job, record.job_module) == ("store.sync", "store.helpers")
    # Registered again (a module reloaded): said once all the same.
    with caplog.at_level(logging.WARNING):
        register(get_definition("store.sync"))
    assert len(late_records(caplog)) == 1


def test_reach_check_names_each_late_job_with_the_fix(project_module):
    project_module("store.helpers", HELPERS)
    importlib.import_module("store.helpers")
    out, err = io.StringIO(), io.StringIO()
    call_command("check", stdout=out, stderr=err)
    assert (
        "?: (django_jobs.W006) Job 'store.sync' is registered in 'store.helpers'" in err.getvalue()
    )
    [warning] = [m for m in check_jobs_reached() if m.id == "django_jobs.W006"]
    assert warning.msg == (
        "Job 'store.sync' is registered in 'store.helpers', a module imported only after "
        "start-up (by a view or the URLconf, say): `runjobs` does not import it, so its jobs "
        "wait, pending, for a worker that knows it."
    )
    assert warning.hint == (
        "Define it in an installed app's jobs.py, or import 'store.helpers' from there."
    )
    unregister("store.sync")
    assert w006(check_jobs_reached()) == []


def test_reach_check_imports_the_urlconf_first(project_module):
    """Jobs of a module the views import at their top: registered once the URLconf is
    imported, which Django's URL check does, in an order of its own; this check does it
    first."""
    project_module("store.helpers", HELPERS)
    project_module("store.views", "from store.helpers import sync\n" + VIEWS)
    project_module("store.urls", URLS)
    with override_settings(ROOT_URLCONF="store.urls"):
        assert "store.helpers" not in sys.modules
        [message] = w006(check_jobs_reached())
    assert "'store.sync' is registered in 'store.helpers'" in message


def test_reach_check_leaves_a_urlconf_that_does_not_import_to_djangos_check(project_module):
    project_module("store.urls", "raise RuntimeError('broken')\n")
    with override_settings(ROOT_URLCONF="store.urls"):
        assert w006(check_jobs_reached()) == []


@pytest.mark.django_db(transaction=True)
def test_reach_runjobs_names_late_jobs_at_start(project_module, capsys):
    project_module("store.helpers", HELPERS)
    importlib.import_module("store.helpers")
    call_command("runjobs", "--burst", skip_checks=False)
    said = capsys.readouterr().err
    assert "(django_jobs.W006) Job 'store.sync' is registered in 'store.helpers'" in said


# -- what a worker imports: not said ----------------------------------------------------


def test_reach_jobs_registered_while_the_apps_load_are_reached():
    """The example app's jobs.py (django_jobs' ready() imports it), the test suite's own
    (tests.support.jobs, and the jobs tests make), the package's own (the task runner)."""
    assert get_definition("emails.welcome").func.__module__ == "testproject.example.jobs"
    assert get_definition("tests.ok").func.__module__ == "tests.support.jobs"
    assert unreached_jobs() == []
    out, err = io.StringIO(), io.StringIO()
    call_command("check", stdout=out, stderr=err)
    assert "W006" not in err.getvalue()


@pytest.fixture
def example_jobs_again(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The example app's jobs module imported again, after start-up; its first
    definitions registered back afterwards."""
    module = sys.modules["testproject.example.jobs"]
    kept = [
        getattr(value, ATTRIBUTE) for value in vars(module).values() if hasattr(value, ATTRIBUTE)
    ]
    monkeypatch.delitem(sys.modules, "testproject.example.jobs")
    yield
    for definition in kept:
        unregister(definition.name)
        register(definition)


def test_reach_an_installed_apps_jobs_module_is_reached_whenever_imported(
    example_jobs_again, caplog
):
    assert apps.ready
    with caplog.at_level(logging.WARNING):
        again = importlib.import_module("testproject.example.jobs")
    assert get_definition("emails.welcome").func is again.send_welcome
    assert late_records(caplog) == [] and unreached_jobs() == []


# -- a job of a module not imported even by the URLconf: read from the source -------------

ALIASED = """
import django_jobs as dj
from django_jobs import job as declare


@dj.job("store.by_package")
def by_package(ctx, payload):
    return payload


@declare(name="store.by_alias")
async def by_alias(ctx, payload):
    return payload


def not_a_job():
    return job("store.not_decorated")
"""


def test_reach_check_reads_the_jobs_of_a_module_a_view_imports_inside_itself(project_module):
    """The lazy import the tutorial warns of: inside the view, so neither the apps nor the
    URLconf import the module, and no registration happens before a request comes. The
    check reads the project apps' source for ``@job`` declarations in modules nothing
    imported."""
    from django.conf import settings

    project_module("store.helpers", HELPERS)
    project_module("store.views", VIEWS)
    project_module("store.urls", URLS)
    project_module("store.aliased", ALIASED)
    project_module("store.jobs", HELPERS.replace("store.sync", "store.reached"))
    project_module("store.tests.test_helpers", HELPERS.replace("store.sync", "store.tested"))
    installed = [*settings.INSTALLED_APPS, "store"]
    with override_settings(INSTALLED_APPS=installed, ROOT_URLCONF="store.urls"):
        messages = w006(check_jobs_reached())
        assert "store.helpers" not in sys.modules  # read, not imported
    assert messages == [
        "Job 'store.by_package' is declared in 'store.aliased' (aliased.py, line 6), a module "
        "nothing imports as the apps load: `runjobs` will not import it, so its jobs would "
        "wait, pending, for a worker that knows it.",
        "Job 'store.by_alias' is declared in 'store.aliased' (aliased.py, line 11), a module "
        "nothing imports as the apps load: `runjobs` will not import it, so its jobs would "
        "wait, pending, for a worker that knows it.",
        "Job 'store.sync' is declared in 'store.helpers' (helpers.py, line 5), a module "
        "nothing imports as the apps load: `runjobs` will not import it, so its jobs would "
        "wait, pending, for a worker that knows it.",
    ]


def test_reach_check_reads_no_module_already_imported(project_module):
    """Imported (by the URLconf, say), a module's jobs are registered: W006 names them once,
    from the registry."""
    from django.conf import settings

    project_module("store.helpers", HELPERS)
    importlib.import_module("store.helpers")
    with override_settings(INSTALLED_APPS=[*settings.INSTALLED_APPS, "store"]):
        [message] = w006(check_jobs_reached())
    assert "'store.sync' is registered in 'store.helpers'" in message
