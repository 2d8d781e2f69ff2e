"""Handlers the tests schedule. Imported by the tests that need them."""

from __future__ import annotations

from typing import Any

from django_jobs import JobContext, Snooze, job

CALLS: list[tuple[int, int, Any]] = []


@job("tests.ok")
def ok(ctx: JobContext, payload: Any) -> None:
    CALLS.append((ctx.job_id, ctx.attempt, payload))


@job("tests.fail", max_attempts=3)
def fail(ctx: JobContext, payload: Any) -> None:
    raise RuntimeError(f"boom {ctx.attempt}")


@job("tests.long_error")
def long_error(ctx: JobContext, payload: Any) -> None:
    raise ValueError("x" * 5000)


@job("tests.emails", queue="emails", priority=5, max_attempts=7)
def emails(ctx: JobContext, payload: Any) -> None:
    return None


@job("tests.leaky", max_attempts=1)
def leaky(ctx: JobContext, payload: Any) -> None:
    raise ValueError(
        f"card {payload['card']} declined for {payload['name']} (pin {payload['pin']})"
    )


@job("tests.stubborn", timeout=0.3, max_attempts=1)
def stubborn(ctx: JobContext, payload: Any) -> None:
    """Ignores ctx: keeps its thread past its timeout (``payload`` seconds, default 1), then
    returns as if it had succeeded."""
    import time

    time.sleep(payload or 1.0)


# -- What handlers raise, what is stored, and secrets -------------------------


class HandlerAbort(BaseException):
    """A handler's own BaseException subclass, not an Exception."""


@job("tests.raises_base", max_attempts=2)
def raises_base(ctx: JobContext, payload: Any) -> None:
    """Raises what ``payload["raise"]`` names: none of them is an Exception."""
    raised: dict[str, BaseException] = {
        "exit": SystemExit(3),
        "interrupt": KeyboardInterrupt(),
        "generator": GeneratorExit(),
        "abort": HandlerAbort("stop everything"),
    }
    raise raised[payload["raise"]]


@job("tests.unstorable_error", max_attempts=2)
def unstorable_error(ctx: JobContext, payload: Any) -> None:
    """An error message that no database stores as is (payloads cannot hold these)."""
    text = {"zero": "bad \x00 byte", "half": "lone \udc80 surrogate"}[payload["text"]]
    raise ValueError(text)


@job("tests.pops_secret", max_attempts=1)
def pops_secret(ctx: JobContext, payload: Any) -> None:
    """Takes its secrets out of the payload before it fails."""
    card = payload.pop("card_token")
    key = payload["auth"].pop("api_key")
    raise ValueError(f"card {card} declined for {payload['name']} with key {key!r}")


def _descend(depth: int, secret: str) -> None:
    if depth > 0:
        _step(depth - 1, secret)
        return
    raise ValueError(f"token {secret} refused at the bottom")


def _step(depth: int, secret: str) -> None:
    """A frame between two of ``_descend``'s, so that Python does not fold the repeats."""
    _descend(depth, secret)


@job("tests.deep_failure", max_attempts=1)
def deep_failure(ctx: JobContext, payload: Any) -> None:
    """Fails ``depth`` calls down, naming the payload's secret in its message."""
    _descend(payload["depth"], payload["api_token"])


@job("tests.csv_error", max_attempts=1)
def csv_error(ctx: JobContext, payload: Any) -> None:
    raise ValueError("row 2: expected 3 columns, got 2")


# -- the runtime (batch claims, settler) --------------------------------------


SLEPT: set[int] = set()  # the jobs whose tests.sleepy handler has returned


@job("tests.sleepy")
def sleepy(ctx: JobContext, payload: Any) -> None:
    """Runs for ``payload["seconds"]``, or until cancelled; then notes that it returned."""
    ctx.wait(payload["seconds"])
    SLEPT.add(ctx.job_id)


@job("tests.deaf")
def deaf(ctx: JobContext, payload: Any) -> None:
    """Sleeps ``payload["seconds"]`` whatever happens (a stop cannot cut it short); then
    notes that it returned."""
    import time

    time.sleep(payload["seconds"])
    SLEPT.add(ctx.job_id)


# -- results -------------------------------------------------------------------


@job("tests.returns", max_attempts=1)
def returns(ctx: JobContext, payload: Any) -> Any:
    """Returns what its payload says: a JSON value, or ``"object"`` for one that is not."""
    value = payload.get("value")
    if value == "object":
        return object()
    if value == "nan":
        return {"ratio": float("nan")}
    return value


@job("tests.patient", max_attempts=3)
def patient(ctx: JobContext, payload: Any) -> None:
    """Waits up to ``payload["seconds"]``, stopping as soon as it is cancelled."""
    ctx.wait(payload["seconds"])
    ctx.raise_if_cancelled()


@job("tests.cancelled_then_fails", max_attempts=3)
def cancelled_then_fails(ctx: JobContext, payload: Any) -> None:
    """``cancel_job()`` asks while it runs, and it fails before a renewal carries the request
    back: the race between a cancel and a failing attempt, made certain."""
    from django_jobs import cancel_job

    cancel_job(ctx.job_id)
    raise RuntimeError("failed after the cancel request")


# -- flow control: a queue of its own, so that "default" stays without limits --------------


@job("tests.keyed", queue="keyed", concurrency=1)
def keyed(ctx: JobContext, payload: Any) -> None:
    pass


@job("tests.keyed_pairs", queue="keyed", concurrency=2)
def keyed_pairs(ctx: JobContext, payload: Any) -> None:
    pass


@job("tests.snoozes", max_attempts=2)
def snoozes(ctx: JobContext, payload: Any) -> None:
    """Snoozes for ``payload["seconds"]``; by ``ctx.snooze`` when ``payload["by_context"]``."""
    if payload.get("by_context"):
        ctx.snooze(payload["seconds"])
    raise Snooze(payload["seconds"])


# -- Workflows ---------------------------------------------------------------------------


@job("tests.flow_step")
def flow_step(ctx: JobContext, payload: Any) -> Any:
    """Returns its payload with what it saw: its dependencies' results and its batch."""
    batch = ctx.batch
    return {
        "payload": payload,
        "seen": {str(k): v for k, v in sorted(ctx.dependency_results.items())},
        "batch": None if batch is None else [batch.id, batch.total],
    }


@job("tests.flow_fail", max_attempts=1)
def flow_fail(ctx: JobContext, payload: Any) -> None:
    raise RuntimeError("this step fails")


@job("tests.flow_fanout")
def flow_fanout(ctx: JobContext, payload: Any) -> int:
    """Adds ``payload`` siblings to its batch."""
    assert ctx.batch is not None
    for n in range(int(payload)):
        ctx.batch.add("tests.flow_step", n)
    return int(payload)


@job("tests.flow_mark", max_attempts=50)
def flow_mark(ctx: JobContext, payload: Any) -> dict[str, Any]:
    """A step of a workflow whose workers may be killed at any moment (so attempts to
    spare): works a few ms and returns its id. Fails if a job it waits for has no result
    yet (each returns ``{"id": its id}``, stored by the write of its success)."""
    import time

    time.sleep(0.003)
    missing = sorted(k for k, v in ctx.dependency_results.items() if not v or v["id"] != k)
    if missing:
        raise RuntimeError(f"started before {missing} succeeded")
    return {"id": ctx.job_id}


#: The span context current in ``tests.traced``'s handler, each attempt; and the tracer it
#: starts a span of its own with, when a test sets one.
TRACED: list[Any] = []
TRACER: list[Any] = []


@job("tests.traced", max_attempts=2)
def traced(ctx: JobContext, payload: Any) -> None:
    from opentelemetry import trace

    TRACED.append(trace.get_current_span().get_span_context())
    if TRACER:
        with TRACER[0].start_as_current_span("inside the handler"):
            pass
    if payload == "fail first" and ctx.attempt == 1:
        raise RuntimeError("the first attempt fails")


@job("tests.async_ok")
async def async_ok(ctx: JobContext, payload: Any) -> Any:
    CALLS.append((ctx.job_id, ctx.attempt, payload))
    return payload


@job("tests.async_cancels_itself", max_attempts=1)
async def async_cancels_itself(ctx: JobContext, payload: Any) -> None:
    """Raises ``CancelledError`` of its own (a task it awaited was cancelled): a failure,
    not a cancel the worker asked for."""
    import asyncio

    raise asyncio.CancelledError("an inner task was cancelled")


@job("tests.async_where")
async def async_where(ctx: JobContext, payload: Any) -> str:
    """The name of the thread the handler runs on."""
    import threading

    return threading.current_thread().name
