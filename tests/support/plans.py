"""The database's plan of a statement, as text, and what the tests look for in it."""

from __future__ import annotations

import re
from typing import Any

from django.db import connection, transaction

TABLES = ("django_jobs_job", "django_jobs_attempt")


def analyze() -> None:
    """Fresh statistics for the jobs tables, as the planner would have them in production."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for table in TABLES:
                cursor.execute(f"ANALYZE {table}")
        elif connection.vendor == "mysql":
            # ANALYZE TABLE would commit the test's transaction. InnoDB recounts on its own
            # (innodb_stats_auto_recalc) and reads a range's size from the index itself.
            return
        else:
            cursor.execute("ANALYZE")


def explain(sql: str, params: Any) -> str:
    """The plan of ``sql``, one line per row of the database's ``EXPLAIN``."""
    analyze()
    with connection.cursor() as cursor:
        prefix = "EXPLAIN QUERY PLAN " if connection.vendor == "sqlite" else "EXPLAIN "
        cursor.execute(prefix + sql, params)
        return "\n".join(" ".join(str(c) for c in row) for row in cursor.fetchall())


def postgresql_plan(sql: str, params: Any, plan: str) -> str:
    """PostgreSQL's ``plan`` of ``sql`` on the statistics as they stand: ``custom`` (made
    for the parameters' values) or ``generic`` (:func:`generic_plan`)."""
    if plan == "generic":
        return generic_plan(sql, params)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def generic_plan(sql: str, params: Any) -> str:
    """PostgreSQL's generic plan of ``sql``: the plan a prepared statement settles on after
    its first runs, made without the parameters' values. ``explain`` cannot show it:
    Django binds the values into the text, so the planner sees them, whatever
    ``plan_cache_mode`` says. The statement is prepared with ``$n`` parameters and
    explained as executed under ``force_generic_plan``."""
    numbers = iter(range(1, len(params) + 1))
    text = re.sub(r"%%|%s", lambda m: "%" if m.group() == "%%" else f"${next(numbers)}", sql)
    values = ", ".join(["%s"] * len(params))
    with transaction.atomic(), connection.cursor() as cursor:  # SET LOCAL needs one
        cursor.execute(f"PREPARE django_jobs_plan AS {text}")
        try:
            cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            cursor.execute(f"EXPLAIN EXECUTE django_jobs_plan({values})", params)
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("DEALLOCATE django_jobs_plan")


def sorts(plan: str) -> bool:
    """The plan sorts rows (PostgreSQL's Sort, SQLite's temporary B-tree, MySQL's filesort)."""
    return any(word in plan for word in ("Sort", "TEMP B-TREE", "Using filesort"))


def scans(plan: str, table: str, *, whole_index: bool = False) -> bool:
    """The plan reads every row of ``table``; ``whole_index``: reading all of an index is not
    counted (a partial index holds only the rows asked for)."""
    if f"Seq Scan on {table}" in plan:
        return True
    for line in plan.splitlines():
        if f"SCAN {table}" in line and not (whole_index and "USING" in line):
            return True  # SQLite: a scan, of the table or of a whole index
        words = line.split()
        if table in words and len(words) > words.index(table) + 1:
            access = words[words.index(table) + 1]
            if access == "ALL" or (access == "index" and not whole_index):
                return True  # MySQL: every row, or every entry of an index
    return False


def mysql_plan(sql: str, params: Any) -> list[dict[str, Any]]:
    """MariaDB's and MySQL's ``EXPLAIN`` of ``sql``: a row per table read, by column name."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
