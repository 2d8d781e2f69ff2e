"""The worker runtime: one tick (:mod:`.core`), threads (:mod:`.server`), the settler,
the heartbeat and the jobs in flight."""

from __future__ import annotations

from .core import TickResult, Worker, make_owner, normalise_queues

__all__ = ["TickResult", "Worker", "make_owner", "normalise_queues"]
