"""Stop signals reach the worker off the signal handler
(:mod:`django_jobs.worker.hosting.stop_signals`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from django_jobs.worker.hosting.stop_signals import StopSignals

ROOT = Path(__file__).resolve().parents[2]

#: The worker's main loop in miniature: the main thread in ``Event.wait(timeout)`` again
#: and again, as ``Server.main_loop`` is, while signals pour in.
STORM = textwrap.dedent(
    """
    import os, signal, threading, time
    import django

    django.setup()
    from django_jobs.worker.hosting.stop_signals import StopSignals

    woken, sent = threading.Event(), threading.Event()
    received = []

    def on_signal(signum):
        received.append(signum)
        woken.set()  # what runjobs does: set the stop event

    def send():
        for _ in range(300):
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.00002)
        sent.set()

    with StopSignals(on_signal, signals=[signal.SIGUSR1]):
        threading.Thread(target=send, daemon=True).start()
        while not sent.is_set():
            woken.wait(0)  # the lock held nearly all the time: the worst case
            woken.clear()
    print(len(received))
    """
)


def test_a_storm_of_signals_on_a_waiting_main_thread_does_not_hang_it() -> None:
    """With ``Event.set()`` in the handler itself this hangs or overflows its stack in
    each run: the handler waits for the event's lock, which its own thread holds inside
    ``wait()``, and each further signal nests another handler in the wait."""
    done = subprocess.run(  # noqa: S603 - this interpreter
        [sys.executable, "-c", STORM],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout) > 0  # signals were relayed, not lost


def test_signals_are_relayed_in_order_and_the_old_handlers_come_back() -> None:
    received: list[int] = []
    both = threading.Event()

    def on_signal(signum: int) -> None:
        received.append(signum)
        if len(received) == 2:
            both.set()

    before = signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGUSR2)
    with StopSignals(on_signal, signals=[signal.SIGUSR1, signal.SIGUSR2]) as relay:
        assert signal.getsignal(signal.SIGUSR1) is not before[0]
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGUSR2)
        assert both.wait(5), received
        thread = relay._thread
    assert received == [signal.SIGUSR1, signal.SIGUSR2]
    assert (signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGUSR2)) == before
    assert signal.set_wakeup_fd(-1) == -1  # the wake-up fd is put back as it was
    assert thread is not None and not thread.is_alive()


def test_a_signal_it_was_not_asked_for_is_not_relayed() -> None:
    received: list[int] = []
    relayed = threading.Event()
    own: list[int] = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: own.append(signum))

    def on_signal(signum: int) -> None:
        received.append(signum)
        relayed.set()

    try:
        with StopSignals(on_signal, signals=[signal.SIGUSR1]):
            os.kill(os.getpid(), signal.SIGUSR2)  # its own handler runs; it reaches the pipe
            os.kill(os.getpid(), signal.SIGUSR1)  # and after it, in the pipe
            assert relayed.wait(5)
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert (received, own) == ([signal.SIGUSR1], [signal.SIGUSR2])
