"""Claiming due jobs. All database-dialect logic lives in this package."""

from __future__ import annotations

from django.db import connections

from .base import ROW_ERRORS, ClaimedJob, Claimer
from .skip_locked import SkipLockedClaimer
from .sqlite import GuardedUpdateClaimer

__all__ = [
    "ROW_ERRORS",
    "ClaimedJob",
    "Claimer",
    "GuardedUpdateClaimer",
    "SkipLockedClaimer",
    "get_claimer",
]


def get_claimer(using: str = "default") -> Claimer:
    """The claimer that suits the database behind ``using``, chosen by its features."""
    features = connections[using].features
    if features.has_select_for_update_skip_locked:
        return SkipLockedClaimer(using)
    return GuardedUpdateClaimer(using)
