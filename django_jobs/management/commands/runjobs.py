"""``manage.py runjobs``: host the workers. A thin shell around :class:`Worker`."""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import router
from django.utils import autoreload

from django_jobs.conf import settings
from django_jobs.exceptions import JobsError
from django_jobs.models import Job
from django_jobs.recurring import sync_from_settings
from django_jobs.worker import Worker, serve
from django_jobs.worker.deadlines import apply_connect_timeout
from django_jobs.worker.startup import (
    check_configured,
    log_unserved_due,
    require_migrated,
    served_queues,
    wait_for_database,
)

logger = logging.getLogger("django_jobs.runjobs")


class Command(BaseCommand):
    help = "Run django-jobs workers: claim due jobs and run them until stopped."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            metavar="NAME",
            help="Serve this queue (repeatable). Default: every queue in DJANGO_JOBS['QUEUES'].",
        )
        parser.add_argument(
            "--workers",
            type=int,
            metavar="N",
            help="Handler threads per queue (default: the queue's 'workers' option).",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Exit 0 once no job on the served queues is due or running.",
        )
        parser.add_argument(
            "--reload",
            action="store_true",
            help="Restart the worker when Python code changes, as runserver does (development).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self._configure_logging(options["verbosity"])
        if options["reload"]:
            if options["burst"]:
                raise CommandError(
                    "--reload and --burst do not go together: a burst worker exits once its "
                    "queues are drained, so there is nothing to restart."
                )
            self.serve_with_reloader(options)
            return
        stop_event, force_event = threading.Event(), threading.Event()
        self._install_signal_handlers(stop_event, force_event)
        if self.run_worker(options, stop_event, force_event):
            raise SystemExit(1)

    def run_worker(
        self, options: dict[str, Any], stop_event: threading.Event, force_event: threading.Event
    ) -> bool:
        """Start up, then serve until ``stop_event``; True if ``force_event`` (a second
        signal) ended the stop."""
        try:
            queues = served_queues(options["queues"], options["workers"])
            using = router.db_for_write(Job)
            check_configured()
            apply_connect_timeout(using, settings.call_timeout_seconds())
            if not wait_for_database(using, stop_event, wait=not options["burst"]):
                return False  # stopped while waiting
            require_migrated(using)
        except (ValueError, JobsError, ImproperlyConfigured) as exc:
            raise CommandError(str(exc)) from None
        log_unserved_due(queues, using)
        sync_from_settings()
        worker = Worker(queues, using=using, burst=options["burst"])
        worker.force_event = force_event
        serve(worker, stop_event)
        return force_event.is_set()

    def serve_with_reloader(self, options: dict[str, Any]) -> None:
        """Serve through Django's autoreloader, as ``runserver`` does.

        This process watches; a child serves, on a thread while its main thread
        watches the code, and is started again (exit status 3) when a file
        changes. The child stops its worker as on a signal before it exits, so
        a restart hands running jobs back rather than leave them to their leases.
        """
        stop_event, force_event = threading.Event(), threading.Event()
        serving: list[threading.Thread] = []

        def main() -> None:  # in the child, on Django's "django-main-thread"
            serving.append(threading.current_thread())
            try:
                self.run_worker(options, stop_event, force_event)
            except CommandError as exc:
                logger.error("%s (waiting for a file change)", exc, extra={"event": "worker_error"})

        if os.environ.get(autoreload.DJANGO_AUTORELOAD_ENV) != "true":
            # The watching process. Ctrl-C reaches the worker too (the terminal signals the
            # process group): leave the stop to it, instead of killing it 0.25 s in.
            signal.signal(signal.SIGINT, lambda signum, frame: None)
        try:
            autoreload.run_with_reloader(main)
        finally:
            # A file changed (SystemExit(3)), SIGTERM (SystemExit(0)) or Ctrl-C (a return):
            # stop the worker as on a first signal; a signal meanwhile is the second one.
            if serving:
                self._install_signal_handlers(stop_event, force_event)
                stop_event.set()
                while serving[0].is_alive():
                    serving[0].join(0.1)
                if force_event.is_set():
                    raise SystemExit(1)  # stopped: no restart

    @staticmethod
    def _install_signal_handlers(stop_event: threading.Event, force_event: threading.Event) -> None:
        def handle(signum: int, frame: Any) -> None:
            # Only set events here; the worker's loop does the rest.
            if stop_event.is_set():
                force_event.set()
            stop_event.set()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    @staticmethod
    def _configure_logging(verbosity: int) -> None:
        """Log to stderr unless the project's LOGGING already handles django_jobs.

        A handler on ``django_jobs`` or on any logger above it (the root logger,
        say) means the project's configuration prints the records: adding one
        here too would print each line twice.
        """
        logger = logging.getLogger("django_jobs")
        level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
        if logger.hasHandlers():
            return
        handler = logging.StreamHandler()
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s")
        )
        logger.addHandler(handler)
        logger.setLevel(level)
