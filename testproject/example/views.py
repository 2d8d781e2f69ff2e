from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_POST

from django_jobs import schedule_job

from .jobs import send_welcome


@require_POST
def signup(request: HttpRequest) -> HttpResponse:
    """Enqueue a welcome mail in the same transaction as the (pretend) sign-up."""
    email = request.POST.get("email", "")
    if "@" not in email:
        return JsonResponse({"error": "an email address is required"}, status=400)
    with transaction.atomic():
        # ... create the user here; the job commits or rolls back with it.
        job = schedule_job(send_welcome, {"email": email}, unique_key=f"welcome:{email}")
    return JsonResponse({"job_id": job.pk}, status=202)


@require_POST
def record(request: HttpRequest) -> HttpResponse:
    """Enqueue two ``example.record`` jobs: one in a transaction of the view's, as
    ``signup`` does, then one on its own (autocommit)."""
    with transaction.atomic():
        inside = schedule_job("example.record", {"from": "view, in its transaction"})
    alone = schedule_job("example.record", {"from": "view"})
    return JsonResponse({"job_ids": [inside.pk, alone.pk]}, status=202)
