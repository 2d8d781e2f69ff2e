"""The admin in a real browser: Debian's Chromium, headless, driven by Playwright.

CI installs Chromium with ``ensure_chromium`` (scripts/lib.sh) and Playwright
with the test extras; ``playwright install`` is never needed.
"""

import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from django_jobs.models import Job, JobStatus

# scripts/test installs both and sets this, so that CI never skips the test quietly.
REQUIRED = os.environ.get("JOBS_TEST_BROWSER") == "required"

if REQUIRED:
    from playwright import sync_api
else:
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
    )

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 10_000
PASSWORD = "browser-test-password"  # noqa: S105

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not REQUIRED and not CHROMIUM.exists(),
        reason=f"{CHROMIUM} is missing (apt-get install chromium)",
    ),
]


def test_dead_letters_retry_in_browser(live_server, django_user_model, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    django_user_model.objects.create_superuser("admin", "admin@example.com", PASSWORD)
    job = Job.objects.create(
        name="tests.ok",
        status=JobStatus.DEAD_LETTERED,
        attempt=3,
        attempts_used=3,
        max_attempts=3,
        run_at=timezone.now() - timedelta(hours=1),
        finished_at=timezone.now() - timedelta(minutes=5),
        last_error="RuntimeError: boom 3",
    )
    dead_letters = reverse("admin:django_jobs_deadletter_changelist")

    # No database access in here: Playwright's sync API runs an event loop.
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            sync_api.expect.set_options(timeout=TIMEOUT_MS)

            page.goto(f"{live_server.url}{reverse('admin:login')}?next={dead_letters}")
            page.fill("#id_username", "admin")
            page.fill("#id_password", PASSWORD)
            page.get_by_role("button", name="Log in").click()
            sync_api.expect(page).to_have_url(f"{live_server.url}{dead_letters}")

            rows = page.locator("#result_list tbody tr")
            sync_api.expect(rows).to_have_count(1)
            sync_api.expect(rows).to_contain_text("tests.ok")
            sync_api.expect(rows).to_contain_text("RuntimeError: boom 3")
            rows.locator("input.action-select").check()
            page.select_option("select[name=action]", label="Retry selected jobs")
            # The action button says "Go" on Django 5.2 and "Run" on Django 6.
            page.locator("div.actions button[type=submit]").click()

            sync_api.expect(page.locator(".messagelist .success")).to_have_text(
                "1 job(s) queued again."
            )
            sync_api.expect(page.locator(".messagelist .warning")).to_have_count(0)
            sync_api.expect(page.locator("#result_list")).to_have_count(0)
        finally:
            browser.close()

    job.refresh_from_db()
    assert job.status == JobStatus.PENDING
    assert job.attempts_used == 0
