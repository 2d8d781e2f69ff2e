"""``runjobs --processes N``: N worker processes under one supervisor.

Each child is a whole ``runjobs`` (its own threads, connections and lease
owner), started as a new process of the same command line, as Django's
autoreloader starts its child: nothing is forked after Django set up its
connections and threads. The environment tells a child that it is child
``k`` of supervisor ``S`` (:data:`SUPERVISOR_ENV`, :data:`PROCESS_ENV`),
so that it serves instead of supervising, and registers under ``S``.

The supervisor never needs the database to supervise: it forwards signals,
restarts children and exits from its main loop alone. Its own registration
(the one Workers-page entry its children are listed under) is kept on a
thread of its own, every call under a deadline, so an outage only delays it.

- Signals: each child runs in a process group of its own, so a terminal's
  Ctrl-C reaches the supervisor only, which forwards one signal to every
  child for each SIGTERM or SIGINT it gets: the first (SIGTERM) is a graceful
  stop, the second (SIGINT, so that the two are not merged into one) stops at
  once, as the second signal to a single ``runjobs``.
- A child that exits while no stop was asked (in ``--burst``: with a status
  other than 0) is started again after a backoff (:class:`Backoff`).
  :data:`CONFIG_EXIT` means it cannot start with these settings: the
  supervisor stops the others and exits 1 instead of restarting it forever.
- A child whose supervisor is gone (``kill -9``) sees the end of a pipe it
  inherited and stops gracefully (:func:`watch_supervisor`).
- The supervisor exits once every child has: 1 if the stop was forced or a
  child could not be kept running, else 0.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from enum import Enum

from django.db import connections

from ...display import format_span
from ..clock import Clock, DatabaseClock
from ..connections import guarded
from ..deadlines import Deadlines
from ..processes import refresh_worker, register_worker, unregister_worker

logger = logging.getLogger(__name__)

#: The supervisor's id, in a child's environment: the child registers under it.
SUPERVISOR_ENV = "DJANGO_JOBS_SUPERVISOR"
#: The child's number (0 .. N-1), in its environment.
PROCESS_ENV = "DJANGO_JOBS_PROCESS"
#: The file descriptor of the pipe whose end tells a child its supervisor is gone.
PIPE_ENV = "DJANGO_JOBS_SUPERVISOR_FD"
#: A child's exit status when it cannot start with these settings (sysexits' EX_CONFIG).
CONFIG_EXIT = 78

#: How often the main loop looks at its children when no signal wakes it.
POLL_SECONDS = 0.2

Spawn = Callable[[int], "subprocess.Popen[bytes]"]


@dataclass
class Backoff:
    """The wait before a child is started again: ``first`` doubling to ``cap``, back to
    ``first`` once a child has lived ``healthy_after`` seconds. A crash loop dies as it
    starts, in a second or two; a child that served ten seconds before it was killed is not
    one, and its slot is not left down for half a minute."""

    first: float = 1.0
    cap: float = 30.0
    healthy_after: float = 10.0
    upcoming: float = 1.0

    def __post_init__(self) -> None:
        self.upcoming = self.first

    def after_exit(self, lived: float) -> float:
        """The delay before the next start of a child that lived ``lived`` seconds."""
        if lived >= self.healthy_after:
            self.upcoming = self.first
        delay = self.upcoming
        self.upcoming = min(self.upcoming * 2, self.cap)
        return delay


class Verdict(Enum):
    RESTART = "restart"
    DONE = "done"  # a stop was asked, or a burst child drained its queues
    GIVE_UP = "give_up"  # it cannot start: do not restart it


def verdict(status: int, *, stopping: bool, burst: bool) -> Verdict:
    """What to do about a child that exited with ``status``."""
    if stopping:
        return Verdict.DONE
    if status == CONFIG_EXIT:
        return Verdict.GIVE_UP
    if burst and status == 0:
        return Verdict.DONE
    return Verdict.RESTART


def describe_status(status: int) -> str:
    """``exit status 1`` or ``killed by SIGKILL`` (Popen's negative status)."""
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit status {status}"


@dataclass
class Slot:
    """Child ``number``: its process now, or when it is to be started again."""

    number: int
    backoff: Backoff
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restart_at: float | None = None
    done: bool = False


@dataclass
class Supervisor:
    """Keeps ``count`` children running until stopped; ``run()`` returns the exit status."""

    count: int
    spawn: Spawn | None = None  # set before run(): signals are counted before that
    burst: bool = False
    monotonic: Callable[[], float] = time.monotonic
    make_backoff: Callable[[], Backoff] = Backoff
    poll_seconds: float = POLL_SECONDS
    signals: int = 0  # SIGTERM/SIGINT received (on_signal only counts)
    woken: threading.Event = field(default_factory=threading.Event)
    slots: list[Slot] = field(default_factory=list)
    forwarded: int = 0
    gave_up: bool = False

    def on_signal(self, signum: int = 0) -> None:
        """For each SIGTERM/SIGINT (:class:`~.stop_signals.StopSignals` calls it, off the
        signal handler): count, wake the loop; the loop forwards."""
        self.signals += 1
        self.woken.set()

    @property
    def stopping(self) -> bool:
        return self.forwarded > 0 or self.gave_up

    def run(self) -> int:
        self.start_all()
        logger.info(
            "started %s worker processes (pids %s)",
            self.count,
            ", ".join(str(self.pid(slot)) for slot in self.slots),
            extra={"event": "supervisor_started", "processes": self.count},
        )
        while not all(slot.done for slot in self.slots):
            self.step()
            self.woken.wait(self.poll_seconds)
            self.woken.clear()
        forced = self.forwarded > 1
        status = 1 if forced or self.gave_up else 0
        logger.info(
            "stopped: %s worker processes ended; exit status %s",
            self.count,
            status,
            extra={"event": "supervisor_stopped", "forced": forced, "status": status},
        )
        return status

    def start_all(self) -> None:
        self.slots = [Slot(number, self.make_backoff()) for number in range(self.count)]
        for slot in self.slots:
            self.start(slot)

    def step(self) -> None:
        """One turn of the loop: forward signals, reap exited children, start due ones."""
        self.forward_signals()
        for slot in self.slots:
            self.reap(slot)
        now = self.monotonic()
        for slot in self.slots:
            if not slot.done and slot.restart_at is not None and now >= slot.restart_at:
                self.start(slot)

    def start(self, slot: Slot) -> None:
        if self.spawn is None:
            raise RuntimeError("Supervisor.spawn is not set")
        slot.process = self.spawn(slot.number)
        slot.started_at = self.monotonic()
        slot.restart_at = None

    @staticmethod
    def pid(slot: Slot) -> int | None:
        return slot.process.pid if slot.process is not None else None

    def forward_signals(self) -> None:
        """One signal to every running child for each signal received, two at most (the
        second already stops a child at once): SIGTERM, then SIGINT. Two of the same signal
        sent in a row may reach a child as one (a signal pending is not queued twice)."""
        while self.forwarded < min(self.signals, 2):
            self.forwarded += 1
            first = self.forwarded == 1
            logger.info(
                "stopping %s" % ("(waiting for the running jobs)" if first else "at once"),
                extra={"event": "supervisor_stopping", "forced": not first},
            )
            self.terminate_all(signal.SIGTERM if first else signal.SIGINT)

    def terminate_all(self, signum: int = signal.SIGTERM) -> None:
        for slot in self.slots:
            if slot.process is not None and slot.process.poll() is None:
                slot.process.send_signal(signum)
            elif slot.process is None or slot.restart_at is not None:
                slot.done = True  # waiting to be started again: it will not be

    def reap(self, slot: Slot) -> None:
        if slot.process is None or slot.done or slot.restart_at is not None:
            return
        status = slot.process.poll()
        if status is None:
            return
        decided = verdict(status, stopping=self.stopping, burst=self.burst)
        if decided is Verdict.RESTART:
            lived = self.monotonic() - slot.started_at
            delay = slot.backoff.after_exit(lived)
            slot.restart_at = self.monotonic() + delay
            logger.warning(
                "worker process %s (pid %s) ended (%s) after %s; starting it again in %s",
                slot.number,
                slot.process.pid,
                describe_status(status),
                format_span(timedelta(seconds=lived)),
                format_span(timedelta(seconds=delay)),
                extra={
                    "event": "supervisor_restarting",
                    "pid": slot.process.pid,
                    "status": status,
                    "delay": delay,
                },
            )
            return
        slot.done = True
        if decided is Verdict.GIVE_UP:
            logger.error(
                "worker process %s (pid %s) cannot start with these settings (%s); stopping "
                "the others",
                slot.number,
                slot.process.pid,
                describe_status(status),
                extra={"event": "supervisor_gave_up", "pid": slot.process.pid, "status": status},
            )
            self.gave_up = True
            self.terminate_all()


def child_command() -> list[str]:
    """The command line that started this process, as Django's autoreloader restarts it."""
    from django.utils import autoreload

    return [str(part) for part in autoreload.get_child_arguments()]


def spawner(
    command: Sequence[str], supervisor_id: str, pipe_fd: int, environ: Mapping[str, str]
) -> Spawn:
    """Start child ``k``: ``command`` in a process group of its own, told who it is."""

    def spawn(number: int) -> subprocess.Popen[bytes]:
        env = {
            **environ,
            SUPERVISOR_ENV: supervisor_id,
            PROCESS_ENV: str(number),
            PIPE_ENV: str(pipe_fd),
        }
        return subprocess.Popen(  # noqa: S603 - this process's own command line
            list(command), env=env, pass_fds=(pipe_fd,), process_group=0
        )

    return spawn


def watch_supervisor(fd: int, stop_event: threading.Event) -> threading.Thread:
    """In a child: stop gracefully once the supervisor is gone (the pipe's end is read)."""

    def watch() -> None:
        try:
            while os.read(fd, 1):
                pass
        except OSError:
            pass
        if not stop_event.is_set():
            logger.warning("the supervisor is gone; stopping", extra={"event": "supervisor_gone"})
            stop_event.set()

    thread = threading.Thread(target=watch, name="supervisor-watch", daemon=True)
    thread.start()
    return thread


class Registration:
    """The supervisor's own row (the Workers page lists its children under it), kept
    fresh on a thread of its own; each call has a deadline and a failure is logged only."""

    def __init__(
        self,
        owner: str,
        queues: Sequence[str],
        using: str,
        *,
        beat_seconds: float,
        call_timeout_seconds: float,
        process_count: int,
        clock: Clock | None = None,
    ) -> None:
        self.owner = owner
        self.queues = list(queues)
        self.process_count = process_count
        self.using = using
        self.beat_seconds = beat_seconds
        self.deadline = Deadlines(using, call_timeout_seconds)
        self.clock: Clock = clock or DatabaseClock(using)
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.run, name="registration", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(self.deadline.seconds * 3)

    def run(self) -> None:
        guarded(self.register, self.using)
        while not self.stop_event.wait(self.beat_seconds):
            guarded(self.refresh, self.using)
        guarded(self.unregister, self.using)
        connections.close_all()

    def register(self) -> None:
        with self.deadline("the supervisor registration"):
            register_worker(
                self.owner,
                self.queues,
                self.clock.now(),
                self.using,
                process_count=self.process_count,
            )

    def refresh(self) -> None:
        with self.deadline("the supervisor registration"):
            refresh_worker(
                self.owner,
                self.queues,
                self.clock.now(),
                self.using,
                process_count=self.process_count,
            )

    def unregister(self) -> None:
        with self.deadline("removing the supervisor registration"):
            unregister_worker(self.owner, self.using)
