"""Imported first by a ``runjobs`` that libfaketime runs (:mod:`tests.support.faketime` puts this
directory on its ``PYTHONPATH``).

libfaketime 0.9.10, told to leave the monotonic clock alone, refuses the absolute sleep
on it that Python's ``time.sleep`` asks for (EINVAL). Here a sleep waits on an event
instead: the same wait, on the monotonic clock, which libfaketime lets through.
"""

import threading
import time
from typing import SupportsIndex


def sleep(seconds: float | SupportsIndex) -> None:
    length = float(seconds)
    if length < 0:
        raise ValueError("sleep length must be non-negative")
    threading.Event().wait(length)


time.sleep = sleep
