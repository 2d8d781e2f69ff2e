"""Threads in tests: racers let go at once, and a worker served for the length of a block.

What the database must keep apart when callers meet (claims, leases, limits) is tried
by starting them together at a barrier; each thread closes its connections when done.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from django.db import connections

#: How long a racer waits for the others at the start, and the test for each racer's end.
START_SECONDS, END_SECONDS = 10.0, 60.0


def race(owners: Iterable[str], work: Callable[[str], object]) -> list[BaseException]:
    """``work(owner)`` on a thread of each owner, started at once; what they raised."""
    owners = list(owners)
    errors: list[BaseException] = []
    start = threading.Barrier(len(owners))

    def run(owner: str) -> None:
        try:
            start.wait(START_SECONDS)
            work(owner)
        except BaseException as exc:  # noqa: BLE001 - the caller asserts on them
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(owner,)) for owner in owners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(END_SECONDS)
    stuck = [thread.name for thread in threads if thread.is_alive()]
    if stuck:
        errors.append(TimeoutError(f"racers still running after {END_SECONDS} s: {stuck}"))
    return errors


@contextmanager
def in_a_thread(run: Callable[[threading.Event], object]) -> Iterator[threading.Thread]:
    """``run(stop)`` on a thread for the block (a worker's ``serve``, a server's ``run``);
    when the block ends, however it ends, ``stop`` set and the thread joined."""
    stop = threading.Event()
    thread = threading.Thread(target=run, args=(stop,))
    thread.start()
    try:
        yield thread
    finally:
        stop.set()
        thread.join(10)
