"""SIGTERM and SIGINT, acted on by a thread rather than in the signal handler.

A Python signal handler runs on the main thread between two of its bytecodes,
and that thread may hold a lock just then: ``Event.wait(timeout)`` takes its
condition's lock again on the way out, and the worker's main loop is in that
call most of the time. A handler that set an ``Event`` there would wait for a
lock its own thread holds, and the process would hang, deaf to any further
signal (the lock is not reentrant).

So nothing in Python runs in the handler: :func:`signal.set_wakeup_fd` has
the interpreter's C handler write the signal's number to a pipe, the Python
handler installed for it does nothing, and a thread reads the pipe and calls
``on_signal`` as ordinary code, free to set events and take locks. The number
is written the moment the signal arrives, also while the main thread is inside
a call into C that would delay a Python handler.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _ignore(signum: int, frame: Any) -> None:
    """The Python-level handler: the pipe carries the signal (see the module's text)."""


class StopSignals:
    """While entered (on the main thread), each of ``signals`` calls ``on_signal(signum)``
    on the ``stop-signals`` thread, in the order they came; on exit the handlers and the
    wake-up file descriptor that were there before are put back.

    Two signals of the same kind that arrive before the first is handled may be merged
    into one by the kernel, as without this class.
    """

    def __init__(
        self, on_signal: Callable[[int], None], signals: Iterable[int] = STOP_SIGNALS
    ) -> None:
        self.on_signal = on_signal
        self.signals = tuple(signals)
        self._previous: dict[int, Any] = {}
        self._previous_fd = -1
        self._read_fd = self._write_fd = -1
        self._thread: threading.Thread | None = None

    def __enter__(self) -> StopSignals:
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)  # set_wakeup_fd requires it
        self._thread = threading.Thread(target=self._relay, name="stop-signals", daemon=True)
        self._thread.start()
        self._previous_fd = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, _ignore)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._write_fd)  # the relay reads the end of the pipe and stops
        if self._thread is not None:
            self._thread.join(1)
        os.close(self._read_fd)

    def _relay(self) -> None:
        while True:
            try:
                received = os.read(self._read_fd, 64)
            except OSError:
                return
            if not received:
                return
            for signum in received:  # the wake-up fd carries every caught signal
                if signum in self.signals:
                    self.on_signal(signum)
