"""One reporter: only django_jobs/events.py logs a job's event or sends a signal.

Read from the package's sources, no database: every other module calls a function of
events.py, so metrics and traces have one place to plug into.
"""

import ast
from pathlib import Path

import pytest

import django_jobs

PACKAGE = Path(django_jobs.__file__).parent
REPORTER = PACKAGE / "events.py"

#: What counts as a job event: a job's life, its recurring schedule's, the leader lease's.
#: The runtime's own lines (worker_started, system_check, write_retry, ...) are not.
JOB_EVENT_PREFIXES = ("job_", "recurring_", "leader_")

#: Calls that send a signal: ``signal.send(...)``, ``signal.send_robust(...)``.
SENDING_METHODS = {"send", "send_robust"}


def job_events_logged(tree: ast.AST) -> list[str]:
    """The job events a module names as ``{"event": "job_..."}`` (a logger's ``extra``)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values, strict=True):
            named = isinstance(key, ast.Constant) and key.value == "event"
            if named and isinstance(value, ast.Constant) and isinstance(value.value, str):
                if value.value.startswith(JOB_EVENT_PREFIXES):
                    found.append(f"line {node.lineno}: {value.value}")
    return found


def signals_sent(tree: ast.AST) -> list[str]:
    """The calls of a module that send a signal, or the reporter's ``send`` imported."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in SENDING_METHODS:
                found.append(f"line {node.lineno}: .{node.func.attr}(")
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("events"):
            if any(alias.name == "send" for alias in node.names):
                found.append(f"line {node.lineno}: imports events.send")
    return found


def sources() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if path != REPORTER)


def test_one_reporter_no_other_module_logs_a_job_event():
    offenders = {
        str(path.relative_to(PACKAGE)): found
        for path in sources()
        if (found := job_events_logged(ast.parse(path.read_text(), str(path))))
    }
    assert offenders == {}


def test_one_reporter_no_other_module_spells_a_job_event_line():
    """The issue's own check: ``git grep -n '"event": "job_' django_jobs | grep -v events.py``."""
    assert [str(p) for p in sources() if '"event": "job_' in p.read_text()] == []


def test_one_reporter_no_other_module_sends_a_signal():
    offenders = {
        str(path.relative_to(PACKAGE)): found
        for path in sources()
        if (found := signals_sent(ast.parse(path.read_text(), str(path))))
    }
    assert offenders == {}


def test_one_reporter_events_py_is_found_by_the_checks():
    """The checks would see what events.py does, were it another module."""
    tree = ast.parse(REPORTER.read_text())
    assert job_events_logged(tree)
    assert signals_sent(tree)


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ('logger.info("x", extra={"event": "job_retried", "job_id": 1})', True),
        ('extra = {"event": "recurring_error", "schedule": name}', True),
        ('logger.info("x", extra={"event": "leader_elected"})', True),
        ('logger.info("x", extra={"event": "worker_started", "owner": o})', False),
        ('logger.info("x", extra={"event": "system_check"})', False),
        ('logger.warning("x", extra={"event": "write_retry"})', False),
        ('logger.info("x", extra={"event": event})', False),
    ],
)
def test_one_reporter_job_events_are_told_from_the_runtime_s_own(source, flagged):
    assert bool(job_events_logged(ast.parse(source))) is flagged


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ("signals.job_started.send(sender=Job, job_id=1)", True),
        ("task_finished.send_robust(sender=s, task_result=r)", True),
        ("from ..events import send", True),
        ("from ..events import report, report_started", False),
        ("report_started(claimed)", False),
    ],
)
def test_one_reporter_signal_sends_are_found(source, flagged):
    assert bool(signals_sent(ast.parse(source))) is flagged


def test_one_reporter_its_tables_name_only_job_events():
    """Every event the reporter's tables name counts as a job event here, so a line moved
    back out of events.py is caught by the check above."""
    from django_jobs import events

    names = [
        *events.JOB_EVENTS,
        *events.LEASE_EVENTS,
        *events.LEADER_EVENTS,
        *events.RECURRING_EVENTS,
        *events.LOGGED_AS.values(),
        *(report.event for report in events.OUTCOMES.values()),
    ]
    assert [name for name in names if not name.startswith(JOB_EVENT_PREFIXES)] == []
