"""When a failed job runs again: capped exponential backoff with jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from .conf import MAX_DELAY_SECONDS, settings


@dataclass(frozen=True)
class RetryPolicy:
    base_seconds: float = 30.0
    max_seconds: float = 3600.0
    jitter: float = 0.2

    @classmethod
    def from_settings(cls) -> RetryPolicy:
        return cls(
            float(settings.RETRY_BASE_SECONDS),
            float(settings.RETRY_MAX_SECONDS),
            float(settings.RETRY_JITTER),
        )


def backoff_seconds(attempt: int, policy: RetryPolicy) -> float:
    """``min(max, base * 2 ** (attempt - 1))`` without overflow for any attempt."""
    if policy.base_seconds <= 0:
        return 0.0
    exponent = max(0, attempt - 1)
    # 2 ** 1100 overflows a float; any exponent past 1000 is over every ceiling.
    if exponent > 1000:
        return policy.max_seconds
    return min(policy.max_seconds, policy.base_seconds * 2.0**exponent)


def next_run_at(
    attempts_used: int,
    max_attempts: int,
    now: datetime,
    policy: RetryPolicy,
    rng: random.Random | None = None,
) -> datetime | None:
    """When the job should run again after its ``attempts_used``-th attempt failed.

    ``None`` means no attempt is left: the job is dead-lettered.
    """
    if attempts_used >= max_attempts:
        return None
    delay = backoff_seconds(attempts_used, policy)
    spread = (rng or random).random() * policy.jitter * delay
    return now + timedelta(seconds=min(delay + spread, MAX_DELAY_SECONDS))
