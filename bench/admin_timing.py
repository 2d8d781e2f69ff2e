"""How bench/admin_pages.py times a page: Django's test client, every statement timed.

A page gets one warm-up request, then the timed ones; its figures are the median
and the slowest request, the number of queries of a request, and the slowest
query's time (its median over the requests).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SLOW_MS = 500.0
ADMIN_USER = "bench-admin"


@dataclass(frozen=True)
class Page:
    label: str
    url: str
    note: str = ""  # why the page was not timed, when url is empty


@dataclass
class Timing:
    """One page's figures; times in milliseconds."""

    label: str
    url: str
    status: int = 0
    median_ms: float = 0.0
    max_ms: float = 0.0
    queries: int = 0
    slowest_query_ms: float = 0.0
    slowest_query: str = ""
    plan: str = ""
    note: str = ""
    statements: list[dict[str, Any]] = field(default_factory=list)  # the last request's

    @property
    def slow(self) -> bool:
        return self.median_ms > SLOW_MS or self.status != 200


def superuser_client() -> Any:
    from django.contrib.auth import get_user_model
    from django.test import Client

    user_model = get_user_model()
    user = user_model.objects.filter(username=ADMIN_USER).first()
    if user is None:
        user = user_model.objects.create_superuser(ADMIN_USER, "bench@example.com", None)
    client = Client()
    client.force_login(user)
    return client


@dataclass
class Query:
    """One statement a request ran, timed around the database driver's call."""

    sql: str
    params: Any
    ms: float


class QueryTimer:
    """``connection.execute_wrapper`` that times every statement (DEBUG's figures are in ms)."""

    def __init__(self) -> None:
        self.queries: list[Query] = []

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        start = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.queries.append(Query(sql, params, 1000 * (time.perf_counter() - start)))


def time_page(client: Any, page: Page, requests: int) -> tuple[Timing, Query | None]:
    """The page's timing and its slowest query over all requests."""
    from django.db import connection

    timing = Timing(page.label, page.url, note=page.note)
    if not page.url:
        return timing, None
    client.get(page.url)  # warm-up: templates, caches, the session
    seconds: list[float] = []
    slowest: list[Query] = []
    for _ in range(requests):
        timer = QueryTimer()
        with connection.execute_wrapper(timer):
            start = time.perf_counter()
            response = client.get(page.url)
            seconds.append(time.perf_counter() - start)
        timing.status = response.status_code
        timing.queries = len(timer.queries)
        if timer.queries:
            slowest.append(max(timer.queries, key=lambda query: query.ms))
        timing.statements = [{"ms": round(q.ms, 2), "sql": q.sql} for q in timer.queries]
    timing.median_ms = 1000 * statistics.median(seconds)
    timing.max_ms = 1000 * max(seconds)
    worst = max(slowest, key=lambda query: query.ms, default=None)
    if worst is not None:
        timing.slowest_query_ms = statistics.median(query.ms for query in slowest)
        timing.slowest_query = worst.sql
    if timing.status != 200:
        timing.note = f"answered {timing.status}"
    return timing, worst


def explain(query: Query) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {query.sql}", query.params)
        return "\n".join(row[0] for row in cursor.fetchall())
