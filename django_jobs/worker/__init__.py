"""The worker runtime, split by role: the wiring and the tick (:mod:`.core`), claiming,
running a held job (:mod:`.execution`), writing outcomes (:mod:`.recording`), the settler,
the jobs in flight with their heartbeat, a dispatcher per queue (:mod:`.dispatcher`) and
the threads of a process (:mod:`.server`). The leader lease and its chores are in
:mod:`.leader`; what only ``runjobs`` uses to host the runtime, in :mod:`.hosting`."""

from __future__ import annotations

from .core import TickResult, Worker, make_owner, normalise_queues
from .server import serve

__all__ = ["TickResult", "Worker", "make_owner", "normalise_queues", "serve"]
