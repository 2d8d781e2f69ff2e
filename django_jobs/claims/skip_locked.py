"""Claiming on databases with ``SELECT ... FOR UPDATE SKIP LOCKED`` (PostgreSQL, MySQL 8).

One transaction reads due rows, skipping those another worker has locked,
marks them running and writes their attempt rows. A failed claim rolls back
whole, so it never uses up an attempt.
"""

from __future__ import annotations

from .base import Claimer


class SkipLockedClaimer(Claimer):
    lock_suffix = " FOR UPDATE SKIP LOCKED"
