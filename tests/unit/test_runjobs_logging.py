"""runjobs adds its own log handler only where nothing above would print the records."""

import logging

from django_jobs.management.commands.runjobs import Command


def test_runjobs_logging_adds_no_handler_when_the_root_logger_prints():
    root, jobs = logging.getLogger(), logging.getLogger("django_jobs")
    printer = logging.StreamHandler()
    root.addHandler(printer)
    before = list(jobs.handlers)
    try:
        Command._configure_logging(1)
        assert jobs.handlers == before  # a second handler would print every line twice
    finally:
        root.removeHandler(printer)
        for handler in jobs.handlers[len(before) :]:
            jobs.removeHandler(handler)
