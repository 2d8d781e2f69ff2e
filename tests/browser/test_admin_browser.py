"""The admin in a real browser: Debian's Chromium, headless, driven by Playwright.

CI installs Chromium with ``ensure_chromium`` (scripts/lib.sh) and Playwright
with the test extras; ``playwright install`` is never needed.
"""

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from django_jobs.models import Attempt, AttemptOutcome, Job, JobStatus, WorkerProcess

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
# Where the walk's screenshots go: JOBS_SCREENSHOTS_DIR (scripts/screenshots sets it to
# docs/images), else the test's own temporary folder.
SCREENSHOTS = os.environ.get("JOBS_SCREENSHOTS_DIR")

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not REQUIRED and not CHROMIUM.exists(),
        reason=f"{CHROMIUM} is missing (apt-get install chromium)",
    ),
]


def log_in(page: "sync_api.Page", server: str, path: str) -> None:
    """Log in as the test's superuser, landing on ``path``; the page's waits bounded."""
    page.set_default_timeout(TIMEOUT_MS)
    sync_api.expect.set_options(timeout=TIMEOUT_MS)
    page.goto(f"{server}{reverse('admin:login')}?next={path}")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    sync_api.expect(page).to_have_url(f"{server}{path}")


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
            log_in(page, live_server.url, dead_letters)

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


def control_room_rows() -> tuple[Job, Job]:
    """A small, lively site: a worker running a job with progress, some jobs done and failed
    in the last hour, one waiting out a backoff, one scheduled and one dead letter."""
    now = timezone.now()
    worker = WorkerProcess.objects.create(
        id="web-1:4242:9f3c",
        host="web-1",
        pid=4242,
        queues=["default", "emails"],
        started_at=now - timedelta(hours=2),
        last_heartbeat_at=now - timedelta(seconds=3),
        jobs_run=1_284,
    )
    for minutes in range(1, 50, 3):  # the chart's last hour
        for outcome in (AttemptOutcome.SUCCEEDED, AttemptOutcome.SUCCEEDED, AttemptOutcome.FAILED):
            ended = now - timedelta(minutes=minutes)
            done = Job.objects.create(
                name="emails.welcome",
                queue="emails",
                status=JobStatus.SUCCEEDED,
                attempt=1,
                attempts_used=1,
                run_at=ended - timedelta(seconds=2),
                started_at=ended - timedelta(seconds=1),
                finished_at=ended,
            )
            Attempt.objects.create(
                job=done,
                number=1,
                owner=worker.id,
                started_at=ended - timedelta(seconds=1),
                finished_at=ended,
                outcome=outcome,
            )
    running = Job.objects.create(
        name="reports.add",
        status=JobStatus.RUNNING,
        attempt=1,
        attempts_used=1,
        lease_owner=worker.id,
        lease_expires_at=now + timedelta(minutes=5),
        run_at=now - timedelta(minutes=2),
        started_at=now - timedelta(minutes=2),
        progress_done=420,
        progress_total=1000,
        progress_note="rows copied",
    )
    Attempt.objects.create(job=running, number=1, owner=worker.id, started_at=running.started_at)
    Job.objects.create(
        name="demo.flaky",
        attempt=1,
        attempts_used=1,
        max_attempts=3,
        run_at=now + timedelta(seconds=40),
        last_error="ConnectionError: the mail server did not answer",
    )
    Job.objects.create(name="reports.add", run_at=now + timedelta(hours=6))
    dead = Job.objects.create(
        name="demo.broken",
        status=JobStatus.DEAD_LETTERED,
        attempt=2,
        attempts_used=2,
        max_attempts=2,
        run_at=now - timedelta(hours=1),
        finished_at=now - timedelta(minutes=12),
        last_error="RuntimeError: the report template is missing",
    )
    Attempt.objects.create(
        job=dead,
        number=2,
        owner=worker.id,
        started_at=now - timedelta(minutes=13),
        finished_at=now - timedelta(minutes=12),
        outcome=AttemptOutcome.FAILED,
        error="RuntimeError: the report template is missing",
        traceback=(
            "Traceback (most recent call last):\n"
            '  File "reports/jobs.py", line 42, in build_report\n'
            '    template = load("monthly.html")\n'
            "RuntimeError: the report template is missing\n"
        ),
    )
    return running, dead


def breadcrumbs_style(page: Any) -> dict[str, Any]:
    """How the page's breadcrumbs look: their bar's colours and padding, and how each link
    is laid out (a list the admin does not style shows its bullets, one item a line)."""
    return page.evaluate(
        """() => {
            const bar = document.querySelector('.breadcrumbs');
            const style = getComputedStyle(bar);
            const links = [...bar.querySelectorAll('a')].map(a => a.getBoundingClientRect());
            const item = bar.querySelector('li');
            return {
                background: style.backgroundColor, color: style.color,
                padding: style.padding, oneLine: new Set(links.map(r => r.top)).size === 1,
                listStyle: item ? getComputedStyle(item).listStyleType : 'none',
            };
        }"""
    )


def test_control_room_walk_in_browser(live_server, django_user_model, settings, tmp_path):
    """The dashboard, the job list, a running job's page and its Cancel, a dead letter's
    Retry: what an operator does first, in a real browser, with screenshots."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    django_user_model.objects.create_superuser("admin", "admin@example.com", PASSWORD)
    running, dead = control_room_rows()
    shots = Path(SCREENSHOTS) if SCREENSHOTS else tmp_path
    shots.mkdir(parents=True, exist_ok=True)
    dashboard = reverse("admin:django_jobs_dashboard")
    jobs = reverse("admin:django_jobs_job_changelist")
    running_page = reverse("admin:django_jobs_job_change", args=[running.pk])
    dead_page = reverse("admin:django_jobs_job_change", args=[dead.pk])

    # No database access in here: Playwright's sync API runs an event loop.
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1920, "height": 1000})
            log_in(page, live_server.url, dashboard)

            emails = page.locator("tr.jobs-queue[data-queue=emails]").first
            sync_api.expect(emails).to_be_visible()
            sync_api.expect(page.locator("svg.jobs-chart").first).to_be_visible()
            page.screenshot(path=str(shots / "admin-dashboard.png"), full_page=True)
            ours = breadcrumbs_style(page)

            page.goto(f"{live_server.url}{jobs}")
            sync_api.expect(page.locator("#result_list")).to_contain_text("rows copied")
            assert ours == breadcrumbs_style(page)  # styled as the admin's own pages' are
            page.screenshot(path=str(shots / "admin-jobs.png"))

            page.goto(f"{live_server.url}{running_page}")
            sync_api.expect(page.locator("progress").first).to_be_visible()
            page.screenshot(path=str(shots / "admin-job.png"), full_page=True)
            page.locator("form.django-jobs-verb button", has_text="Cancel").click()
            sync_api.expect(page.locator(".messagelist .success")).to_contain_text("asked to stop")

            page.goto(f"{live_server.url}{dead_page}")
            # The last error and its traceback first, open, full width, not wrapped.
            last = page.locator("fieldset.django-jobs-failure pre.django-jobs-trace")
            sync_api.expect(last).to_contain_text("line 42, in build_report")
            assert last.evaluate("e => getComputedStyle(e).whiteSpace") == "pre"
            module = page.locator("fieldset.django-jobs-failure").bounding_box()
            fields = page.locator("fieldset.module").nth(1).bounding_box()  # the job's fields
            assert module is not None and fields is not None and module["y"] < fields["y"]
            assert module["width"] >= fields["width"] - 1  # as wide as the page's content
            page.screenshot(path=str(shots / "admin-dead-letter.png"), full_page=True)
            trace = page.locator("details.django-jobs-traceback pre")
            sync_api.expect(trace).to_be_hidden()  # each attempt's folded until asked for
            page.locator("details.django-jobs-traceback summary").click()
            sync_api.expect(trace).to_contain_text("line 42, in build_report")
            retry = page.locator("form.django-jobs-verb button", has_text="Retry").first
            sync_api.expect(retry).to_have_text("Retry")
            retry.click()
            sync_api.expect(page.locator(".messagelist .success")).to_contain_text("queued again")
        finally:
            browser.close()

    running.refresh_from_db()
    dead.refresh_from_db()
    assert running.status == JobStatus.RUNNING and running.cancel_requested_at is not None
    assert (dead.status, dead.attempts_used) == (JobStatus.PENDING, 0)


LONG_ERROR = (
    "ConnectionError: HTTPSConnectionPool(host='api.payments.example', port=443): Max retries"
    " exceeded with url: /v2/customers/cus_8472/invoices?expand=lines (Caused by"
    " NewConnectionError('<urllib3.connection.HTTPSConnection object>: Failed to establish a"
    " new connection: [Errno 111] Connection refused'))"
)


def assert_list_fits(page: Any, width: int) -> None:
    """The change list's page is no wider than the window, and the list's own box (which
    scrolls sideways when its table is wider) does not scroll."""
    scroll_width = page.evaluate("document.documentElement.scrollWidth")
    assert scroll_width <= width, f"the page is {scroll_width} px wide"
    widths = page.evaluate(
        "(() => { const r = document.querySelector('#changelist .results');"
        " return [r.scrollWidth, r.clientWidth]; })()"
    )
    assert widths[0] <= widths[1], f"the table is {widths[0]} px in {widths[1]} px"


def test_jobs_list_fits_a_1366_px_window_with_the_sidebar_open(
    live_server, django_user_model, settings, tmp_path
):
    """A laptop's window: every column, the last error's included, without scrolling sideways;
    a long cell is cut, its whole text in its tooltip."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    django_user_model.objects.create_superuser("admin", "admin@example.com", PASSWORD)
    control_room_rows()
    now = timezone.now()
    Job.objects.create(
        name="billing.invoices.reconcile_customer_ledger_entries",
        queue="billing-reconciliation",
        attempt=2,
        attempts_used=2,
        max_attempts=25,
        run_at=now + timedelta(minutes=3),
        last_error=LONG_ERROR,
    )
    shots = Path(SCREENSHOTS) if SCREENSHOTS else tmp_path
    shots.mkdir(parents=True, exist_ok=True)
    jobs = reverse("admin:django_jobs_job_changelist")

    # No database access in here: Playwright's sync API runs an event loop.
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1366, "height": 768})
            log_in(page, live_server.url, jobs)
            sync_api.expect(page.locator("#nav-sidebar")).to_be_visible()  # open, as it starts

            page.screenshot(path=str(shots / "admin-jobs-1366.png"))
            assert_list_fits(page, 1366)
            shown = page.locator("#changelist .results").bounding_box()
            error_cell = page.locator("#result_list td.field-short_error", has_text="HTTPS").first
            box = error_cell.bounding_box()
            assert shown is not None and box is not None
            assert box["x"] + box["width"] <= shown["x"] + shown["width"] + 1
            assert box["width"] >= 150, f"the last error has {box['width']} px"
            assert error_cell.locator("span").get_attribute("title") == LONG_ERROR
            long_name = "billing.invoices.reconcile_customer_ledger_entries"
            name = page.locator(f"span.django-jobs-cut[title='{long_name}']")
            assert name.count() == 1
            # Cut from its start: the end of the name shows, its first letters do not.
            first, last, box = name.evaluate(
                """e => {
                    const text = e.querySelector('bdi').firstChild, range = document.createRange();
                    const at = i => { range.setStart(text, i); range.setEnd(text, i + 1);
                                      return range.getBoundingClientRect(); };
                    return [at(0).left, at(text.length - 1).right, e.getBoundingClientRect()];
                }"""
            )
            assert first < box["left"], "the name's start is shown"
            assert last <= box["right"] + 1, "the name's end is cut"
        finally:
            browser.close()


def test_workers_list_fits_a_1366_px_window_with_the_sidebar_open(
    live_server, django_user_model, settings, tmp_path
):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    django_user_model.objects.create_superuser("admin", "admin@example.com", PASSWORD)
    control_room_rows()
    now = timezone.now()
    WorkerProcess.objects.create(
        id="worker-billing-reconciliation-7.eu-west-1.internal:31337:0c4f9e2a",
        host="worker-billing-reconciliation-7.eu-west-1.internal",
        pid=31337,
        queues=["default", "emails", "billing-reconciliation", "reports", "webhooks"],
        started_at=now - timedelta(days=3),
        last_heartbeat_at=now - timedelta(seconds=2),
        jobs_run=12_345_678,
    )
    shots = Path(SCREENSHOTS) if SCREENSHOTS else tmp_path
    shots.mkdir(parents=True, exist_ok=True)
    workers = reverse("admin:django_jobs_workerprocess_changelist")

    # No database access in here: Playwright's sync API runs an event loop.
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1366, "height": 768})
            log_in(page, live_server.url, workers)
            sync_api.expect(page.locator("#nav-sidebar")).to_be_visible()
            page.screenshot(path=str(shots / "admin-workers-1366.png"))
            assert_list_fits(page, 1366)
        finally:
            browser.close()


def test_queues_pause_and_resume_in_browser(live_server, django_user_model, settings):
    from django_jobs.models import Queue

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.DJANGO_JOBS = {"QUEUES": {"default": {"workers": 2, "global_limit": 2}}}
    django_user_model.objects.create_superuser("admin", "admin@example.com", PASSWORD)
    Job.objects.create(name="tests.ok", run_at=timezone.now() - timedelta(minutes=1))
    queues = reverse("admin:django_jobs_queue_changelist")

    def run_action(page: "sync_api.Page", label: str) -> None:
        page.locator("#result_list tbody tr").filter(has_text="default").locator(
            "input.action-select"
        ).check()
        page.select_option("select[name=action]", label=label)
        page.locator("div.actions button[type=submit]").click()

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            log_in(page, live_server.url, queues)

            row = page.locator("#result_list tbody tr").filter(has_text="default")
            sync_api.expect(row).to_contain_text("served")
            sync_api.expect(row).to_contain_text("global limit 2")
            run_action(page, "Pause the selected queues")
            sync_api.expect(page.locator(".messagelist .success")).to_contain_text(
                "1 queue(s) paused"
            )
            sync_api.expect(row).to_contain_text("paused since")
            run_action(page, "Resume the selected queues")
            sync_api.expect(page.locator(".messagelist .success")).to_contain_text(
                "1 queue(s) resumed"
            )
            sync_api.expect(row).to_contain_text("served")
        finally:
            browser.close()

    assert Queue.objects.get(name="default").paused_at is None


def test_workflow_graph_and_batch_page_in_browser(live_server, django_user_model, settings):
    """A job in a small chain shows what it waits for and what waits for it; each node
    leads to that job's page; its batch's page shows the progress and the members."""
    from django_jobs import batch, chain
    from django_jobs.scheduling import JobSpec

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    django_user_model.objects.create_superuser("admin", "admin@example.com", PASSWORD)
    with batch(name="import 42") as b:
        first, middle, last = chain(
            JobSpec("tests.ok", 1), JobSpec("tests.ok", 2), JobSpec("tests.ok", 3)
        )
    middle_url = reverse("admin:django_jobs_job_change", args=[middle.pk])
    first_url = reverse("admin:django_jobs_job_change", args=[first.pk])

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            log_in(page, live_server.url, middle_url)
            graph = page.locator(".django-jobs-graph")
            sync_api.expect(graph).to_be_visible()
            before = graph.locator(".django-jobs-waits-for .django-jobs-node")
            sync_api.expect(before).to_have_count(1)
            sync_api.expect(before).to_contain_text(f"tests.ok #{first.pk}")
            sync_api.expect(before.locator(".django-jobs-status")).to_have_text("pending")
            after = graph.locator(".django-jobs-waited-for-by .django-jobs-node")
            sync_api.expect(after).to_contain_text(f"tests.ok #{last.pk}")
            sync_api.expect(after.locator(".django-jobs-status")).to_have_text("waiting")
            # The nodes sit side by side, left to right: what it waits for, it, what waits.
            left, right = before.bounding_box(), after.bounding_box()
            assert left is not None and right is not None and left["x"] < right["x"]
            before.click()
            sync_api.expect(page).to_have_url(f"{live_server.url}{first_url}")

            batch_link = page.locator(".django-jobs-batch a")
            sync_api.expect(batch_link).to_have_text(f"batch #{b.pk} import 42 (0/3 ended)")
            batch_link.click()
            sync_api.expect(page.locator("progress")).to_be_visible()
            sync_api.expect(page.locator(".django-jobs-members .django-jobs-node")).to_have_count(3)
            page.get_by_role("link", name="Its jobs in the Jobs list").click()
            sync_api.expect(page.locator("#result_list tbody tr")).to_have_count(3)
        finally:
            browser.close()
