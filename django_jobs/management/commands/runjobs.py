"""``manage.py runjobs``: host the workers. A thin shell around :class:`Worker`."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import OperationalError, connections, router
from django.utils import autoreload

from django_jobs import telemetry
from django_jobs.conf import processes_problem, settings
from django_jobs.exceptions import JobsError
from django_jobs.models import Job
from django_jobs.recurring import sync_from_settings
from django_jobs.text import is_number_text
from django_jobs.worker import Worker, serve
from django_jobs.worker.core import make_owner
from django_jobs.worker.deadlines import apply_connect_timeout
from django_jobs.worker.hosting.startup import (
    check_configured,
    log_unserved_due,
    require_migrated,
    served_queues,
    wait_for_database,
)
from django_jobs.worker.hosting.stop_signals import StopSignals
from django_jobs.worker.hosting.supervisor import (
    CONFIG_EXIT,
    PIPE_ENV,
    SUPERVISOR_ENV,
    Registration,
    Supervisor,
    child_command,
    spawner,
    watch_supervisor,
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
            "--processes",
            type=processes_option,
            metavar="N",
            help="Worker processes under one supervisor, each with its queues' threads "
            "(default: DJANGO_JOBS['PROCESSES'], 1); 'auto': one per core.",
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
        parser.add_argument(
            "--metrics-port",
            type=int,
            metavar="PORT",
            help="Serve this worker's metrics for Prometheus at http://ADDRESS:PORT/metrics "
            "(with --processes, the sum of its processes'). Needs prometheus_client.",
        )
        parser.add_argument(
            "--metrics-address",
            default="127.0.0.1",
            metavar="ADDRESS",
            help="The address --metrics-port listens on (default 127.0.0.1).",
        )

    def execute(self, *args: Any, **options: Any) -> Any:
        """As Django's; in a child of ``runjobs --processes``, what stops it from starting
        (the system checks, the start-up checks) exits ``CONFIG_EXIT``: its supervisor then
        stops instead of starting it again and again."""
        try:
            self.deferred_checks = False
            if self.requires_system_checks and not options.get("skip_checks"):
                self.deferred_checks = not self.check_unless_unreachable()
                options["skip_checks"] = True
            return super().execute(*args, **options)
        except CommandError as exc:
            if os.environ.get(SUPERVISOR_ENV):
                exc.returncode = CONFIG_EXIT
            raise

    def check_unless_unreachable(self) -> bool:
        """Django's system checks, as its ``execute()`` runs them; False if they need the
        database and it does not answer (on MariaDB/MySQL, Django 6's model checks read the
        server's version): :meth:`start_up` runs them once it answers, so that a worker
        started before its database waits for it instead of failing with a traceback."""
        try:
            self.check()
        except OperationalError:
            connections.close_all()
            return False
        return True

    def handle(self, *args: Any, **options: Any) -> None:
        supervisor = os.environ.get(SUPERVISOR_ENV)
        if supervisor:  # a child of `runjobs --processes`: serve, whatever --processes says
            self._configure_logging(options["verbosity"], with_pid=True)
            self.serve_as_child(options, supervisor)
            return
        try:
            processes = settings.process_count(options["processes"])
        except (ValueError, ImproperlyConfigured) as exc:
            raise CommandError(str(exc)) from None
        self._configure_logging(options["verbosity"], with_pid=processes > 1)
        port = options["metrics_port"]
        if port is not None and not 1 <= port <= 65535:
            raise CommandError(f"--metrics-port must be a port from 1 to 65535, got {port}.")
        if port is not None and options["reload"]:
            raise CommandError(
                "--metrics-port and --reload do not go together: each reload would serve "
                "the metrics anew. Leave --metrics-port out while developing."
            )
        if options["reload"]:
            if options["burst"]:
                raise CommandError(
                    "--reload and --burst do not go together: a burst worker exits once its "
                    "queues are drained, so there is nothing to restart."
                )
            if processes > 1:
                raise CommandError(
                    f"--reload runs one worker process, not {processes}: give --processes 1 "
                    "with --reload (it overrides DJANGO_JOBS['PROCESSES'])."
                )
            self.serve_with_reloader(options)
            return
        with self.metrics_served(options, children=processes > 1):
            if processes > 1:
                if self.supervise(options, processes):
                    raise SystemExit(1)
                return
            stop_event, force_event = threading.Event(), threading.Event()
            with stop_signals(stop_event, force_event):
                forced = self.run_worker(options, stop_event, force_event)
        if forced:
            raise SystemExit(1)

    @contextlib.contextmanager
    def metrics_served(self, options: dict[str, Any], *, children: bool) -> Iterator[None]:
        """With ``--metrics-port``: this worker's metrics served while it runs (a
        supervisor's, ``children``: the sum of its children's, which write them to a
        directory it makes and removes)."""
        port, address = options["metrics_port"], options["metrics_address"]
        if port is None:
            yield
            return
        try:
            if children:
                server, directory = telemetry.serve_children(port, address)
            else:
                server, directory = telemetry.serve(port, address), None
        except (OSError, ValueError) as exc:
            raise CommandError(f"could not serve the metrics on {address}:{port}: {exc}") from None
        logger.info(
            "metrics served at http://%s:%s/metrics",
            address,
            port,
            extra={"event": "metrics_served", "port": port, "address": address},
        )
        try:
            yield
        finally:
            telemetry.stop_serving(server, directory)

    def start_up(self, options: dict[str, Any], stop_event: threading.Event) -> dict[str, int]:
        """The checks before serving; the queues served, or {} if stopped while waiting for
        the database. :class:`CommandError` for what stops the worker."""
        try:
            queues = served_queues(options["queues"], options["workers"])
            using = router.db_for_write(Job)
            check_configured()
            apply_connect_timeout(using, settings.call_timeout_seconds())
            if not wait_for_database(using, stop_event, wait=not options["burst"]):
                return {}  # stopped while waiting
            if getattr(self, "deferred_checks", False):
                self.deferred_checks = False
                self.check()  # a SystemCheckError is a CommandError
            require_migrated(using)
        except (ValueError, JobsError, ImproperlyConfigured) as exc:
            raise CommandError(str(exc)) from None
        return queues

    def run_worker(
        self,
        options: dict[str, Any],
        stop_event: threading.Event,
        force_event: threading.Event,
        supervisor: str | None = None,
    ) -> bool:
        """Start up, then serve until ``stop_event``; True if ``force_event`` (a second
        signal) ended the stop."""
        queues = self.start_up(options, stop_event)
        if not queues:
            return False
        using = router.db_for_write(Job)
        log_unserved_due(queues, using)
        sync_from_settings()
        worker = Worker(queues, using=using, burst=options["burst"], supervisor=supervisor)
        worker.force_event = force_event
        serve(worker, stop_event)
        return force_event.is_set()

    def serve_as_child(self, options: dict[str, Any], supervisor: str) -> None:
        """Serve as a child of supervisor ``supervisor``: registered under it, stopped when
        it is gone."""
        stop_event, force_event = threading.Event(), threading.Event()
        with stop_signals(stop_event, force_event):
            if is_number_text(os.environ.get(PIPE_ENV, "")):
                watch_supervisor(int(os.environ[PIPE_ENV]), stop_event)
            forced = self.run_worker(options, stop_event, force_event, supervisor)
        if forced:
            raise SystemExit(1)

    def supervise(self, options: dict[str, Any], processes: int) -> bool:
        """Check once, then keep ``processes`` children serving until stopped; True if the
        stop was forced or a child could not be kept running (exit status 1)."""
        supervisor = Supervisor(processes, burst=options["burst"])
        waiting = threading.Event()  # set by a signal while the database is awaited

        def on_signal(signum: int) -> None:
            supervisor.on_signal(signum)
            waiting.set()

        with StopSignals(on_signal):
            return self._supervise(options, processes, supervisor, waiting)

    def _supervise(
        self,
        options: dict[str, Any],
        processes: int,
        supervisor: Supervisor,
        waiting: threading.Event,
    ) -> bool:
        queues = self.start_up(options, waiting)
        if not queues:
            return False
        connections.close_all()  # the checks' connection: the supervisor's loop needs none
        owner = make_owner()
        using = router.db_for_write(Job)
        registration = Registration(
            owner,
            list(queues),
            using,
            beat_seconds=settings.heartbeat_seconds(),
            call_timeout_seconds=settings.call_timeout_seconds(),
            process_count=processes,
        )
        registration.start()
        read_end, write_end = os.pipe()  # the children see its end when this process is gone
        supervisor.spawn = spawner(child_command(), owner, read_end, os.environ)
        try:
            return supervisor.run() != 0
        finally:
            registration.stop()
            os.close(write_end)
            os.close(read_end)

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
                with stop_signals(stop_event, force_event):
                    stop_event.set()
                    while serving[0].is_alive():
                        serving[0].join(0.1)
                if force_event.is_set():
                    raise SystemExit(1)  # stopped: no restart

    @staticmethod
    def _configure_logging(verbosity: int, *, with_pid: bool = False) -> None:
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
        # A child of `runjobs --processes` says which process wrote each line.
        where = "pid %(process)d %(threadName)s" if with_pid else "%(threadName)s"
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s %(levelname)s {where} %(name)s: %(message)s")
        )
        logger.addHandler(handler)
        logger.setLevel(level)


def stop_signals(stop_event: threading.Event, force_event: threading.Event) -> StopSignals:
    """The first SIGTERM or SIGINT sets ``stop_event`` (a graceful stop), the next one
    ``force_event`` too (stop at once); the worker's loop does the rest."""

    def on_signal(signum: int) -> None:
        if stop_event.is_set():
            force_event.set()
        stop_event.set()

    return StopSignals(on_signal)


def processes_option(text: str) -> int | str:
    """``--processes``: a whole number from 1, or ``auto``."""
    value: int | str = text
    if text != "auto":
        if not is_number_text(text.strip()):
            raise argparse.ArgumentTypeError(f"must be a whole number or 'auto', got {text!r}")
        value = int(text)
    problem = processes_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(f"{problem}, got {text!r}")
    return value
