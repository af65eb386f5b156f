"""The console's admin area in a real browser (Debian's Chromium, driven by Playwright),
signed in as the seeded administrator: Configuration, Batch Concurrency, Batches, Prompts,
Requests and Recent Requests, each proven by what the gateway then does; and, signed in as
a user, no admin link and 403 from every route behind it. Screenshots of each page go to
``tests/e2e/screenshots/``.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
from playwright.sync_api import Browser, Page, expect

from local.run import LocalStack
from tests.e2e.conftest import chat, root
from tests.e2e.console_support import (
    AXE,
    User,
    browser,
    console,
    page,
    playwright,
    shot,
    sign_in,
    wait_status,
)
from tests.support import wait_for

__all__ = ["browser", "page", "playwright"]  # the browser fixtures, used by name

ADMIN_KEY = "sk-local-admin"


def admin_nav(page: Page, name: str) -> None:
    page.get_by_role("navigation", name="Console").get_by_role("list", name="Admin").get_by_role(
        "link", name=name, exact=True
    ).click()


def creates(user: User, n: int) -> int:
    """The status a create of ``n`` requests answers (a batch made is left to run)."""
    answer = user.http.post("/batches", json={"requests": [chat(f"r{i}", "hi") for i in range(n)]})
    return answer.status_code


def test_a_setting_changed_in_the_console_applies_and_a_refused_value_changes_nothing(
    page: Page, stack: LocalStack
) -> None:
    user = User(stack)
    admin = root(stack, ADMIN_KEY)
    sign_in(page, stack, ADMIN_KEY)
    admin_nav(page, "Configuration")
    row = page.locator('tr[data-setting="BATCH_MAX_REQUESTS"]')
    expect(row.locator("[data-source]")).to_have_text("default")
    expect(page.locator('tr[data-setting="BATCH_EXPANSION_ENABLED"]')).to_have_count(0)
    try:
        row.get_by_role("textbox").fill("2")
        row.get_by_role("button", name=re.compile("^Save")).click()
        expect(row.locator("[data-source]")).to_have_text("stored")
        # The gateway then behaves by it: three requests are one too many.
        wait_for(
            lambda: creates(user, 3) == 400, timeout=30, interval=0.3, what="BATCH_MAX_REQUESTS=2 applied"
        )
        # A value the API refuses shows its message, and the stored value stays.
        row.get_by_role("textbox").fill("-5")
        row.get_by_role("button", name=re.compile("^Save")).click()
        expect(row.get_by_role("alert")).to_contain_text("BATCH_MAX_REQUESTS")
        stored = {s["name"]: s for s in admin.get("/admin/config").json()["data"]}["BATCH_MAX_REQUESTS"]
        assert (stored["value"], stored["source"]) == (2, "runtime")
        shot(page, "admin-config")
        row.get_by_role("button", name=re.compile("^Reset to default")).click()
        expect(row.locator("[data-source]")).to_have_text("default")
    finally:
        admin.delete("/admin/config/BATCH_MAX_REQUESTS").raise_for_status()
        wait_for(lambda: creates(user, 3) == 200, timeout=30, interval=0.3, what="BATCH_MAX_REQUESTS back")


def test_a_models_cap_is_set_and_cleared_in_batch_concurrency(page: Page, stack: LocalStack) -> None:
    admin = root(stack, ADMIN_KEY)
    sign_in(page, stack, ADMIN_KEY)
    admin_nav(page, "Batch Concurrency")
    row = page.locator('tr[data-model="sim-embed"]')
    try:
        row.get_by_role("textbox").fill("3")
        row.get_by_role("button", name=re.compile("^Save")).click()
        expect(page.locator('tr[data-model="sim-embed"] [data-cap]')).to_have_attribute("data-cap", "3")
        model = {m["id"]: m for m in admin.get("/admin/batch/models").json()["data"]}["sim-embed"]
        assert model["max_concurrency"] == 3
        row = page.locator('tr[data-model="sim-embed"]')
        row.get_by_role("textbox").fill("-1")
        row.get_by_role("button", name=re.compile("^Save")).click()
        expect(row.get_by_role("alert")).to_contain_text("max_concurrency")
        shot(page, "admin-concurrency")
        row.get_by_role("textbox").fill("")
        row.get_by_role("button", name=re.compile("^Save")).click()
        expect(page.locator('tr[data-model="sim-embed"] [data-cap]')).to_contain_text(
            "BATCH_MODEL_CONCURRENCY"
        )
        model = {m["id"]: m for m in admin.get("/admin/batch/models").json()["data"]}["sim-embed"]
        assert model["max_concurrency"] is None
    finally:
        admin.patch("/admin/batch/models/sim-embed", json={"max_concurrency": None}).raise_for_status()


def test_an_admin_opens_another_users_batch_prompts_and_requests_then_cancels_it(
    page: Page, stack: LocalStack
) -> None:
    user = User(stack)
    done = user.batch("admin done", [chat("a", "first prompt"), chat("b", "second prompt")])
    wait_status(user, done, "completed")
    sign_in(page, stack, ADMIN_KEY)
    admin_nav(page, "Batches")
    expect(page.get_by_role("heading", name="Totals per user")).to_be_visible()
    totals = page.locator(f'table.totals tr[data-user="{user.account.id}"]')
    expect(totals).to_contain_text(re.compile(r"user \d+"))
    page.get_by_label("User ID").fill(user.account.id)
    page.get_by_role("button", name="Search", exact=True).click()
    row = page.locator(f'tr[data-batch="{done}"]')
    expect(row).to_contain_text("@example.com")  # the owner by name and email, not an id
    shot(page, "admin-batches")

    row.get_by_role("link", name=re.compile("^Prompts")).click()
    expect(page.locator("article.prompt")).to_have_count(2)
    expect(page.locator('article.prompt[data-request="a"]')).to_contain_text("first prompt")
    expect(page.locator('article.prompt[data-request="a"]')).to_contain_text("echo")
    shot(page, "admin-prompts")
    audit = root(stack, ADMIN_KEY).get("/admin/audit", params={"user": user.account.id}).json()["data"]
    assert any(e.get("action") == "batch.requests.read" and done in str(e) for e in audit), audit[:3]

    page.get_by_role("link", name="Its requests").click()
    expect(page.locator("[data-chip]")).to_contain_text(done)
    expect(page.locator("table.requests tbody tr")).to_have_count(2)
    shot(page, "admin-requests-batch")

    # Made now, it still runs when its row is found: 40 requests of 2 s on the model's 4 slots.
    slow = user.batch("admin slow", [chat(f"s{i}", "slow [[sim latency_ms=2000]]") for i in range(40)])
    admin_nav(page, "Batches")
    page.get_by_label("User ID").fill(user.account.id)
    page.get_by_role("button", name="Search", exact=True).click()
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f'tr[data-batch="{slow}"]').get_by_role("button", name=re.compile("^Cancel")).click()
    wait_status(user, slow, "cancelling", "cancelled")


def test_prompts_say_why_where_the_gateway_keeps_no_prompts(page: Page, stack: LocalStack) -> None:
    user = User(stack)
    batch_id = user.batch("no prompts", [chat("a", "hi")])
    admin = root(stack, ADMIN_KEY)
    admin.patch("/admin/config/DB_STORE_FULL_CONTENT", json={"value": False}).raise_for_status()
    try:
        wait_for(
            lambda: admin.get(f"/admin/batch/jobs/{batch_id}/requests").status_code == 403,
            timeout=30,
            interval=0.3,
            what="prompts off",
        )
        sign_in(page, stack, ADMIN_KEY)
        page.goto(console(stack) + f"admin/prompts/{batch_id}")
        expect(page.locator('[data-why="prompts_not_stored"]')).to_contain_text("does not keep prompts")
        shot(page, "admin-prompts-not-kept")
    finally:
        admin.delete("/admin/config/DB_STORE_FULL_CONTENT").raise_for_status()
        wait_for(
            lambda: admin.get(f"/admin/batch/jobs/{batch_id}/requests").status_code == 200,
            timeout=30,
            interval=0.3,
            what="prompts back",
        )


def _click_last_bar(page: Page) -> None:
    """Click the newest bar of the chart: bars are spread evenly over the plot's width."""
    over = page.locator("figure.chart .u-over")
    box = over.bounding_box()
    assert box is not None
    bars = page.locator("table.bars tbody tr").count()
    over.click(position={"x": box["width"] * (bars - 0.5) / bars, "y": box["height"] - 2})


def test_a_recent_requests_bar_narrows_the_list_and_links_to_its_batch_requests(
    page: Page, stack: LocalStack
) -> None:
    user = User(stack)
    asked = user.http.post(
        "/chat/completions", json={"model": "sim-chat", "messages": [{"role": "user", "content": "direct"}]}
    )
    assert asked.status_code == 200, asked.text
    batch_id = user.batch("beside it", [chat("a", "hi")])
    wait_status(user, batch_id, "completed")
    sign_in(page, stack, ADMIN_KEY)
    admin_nav(page, "Recent Requests")
    expect(page.locator('[data-card="Last hour"]')).to_contain_text("batch requests")
    expect(page.locator("figure.chart canvas").first).to_be_visible()
    _click_last_bar(page)
    chip = page.locator("[data-chip]")
    expect(chip).to_contain_text("Window")
    expect(page.locator("table.requests")).to_contain_text(user.account.id)
    shot(page, "admin-recent-window")
    page.get_by_role("link", name="Batch requests in this window").click()
    expect(page).to_have_url(re.compile(r"/console/admin/requests\?from=\d+&to=\d+"))
    expect(page.locator("[data-chip]")).to_contain_text("Window")
    expect(page.locator(f'table.requests tr:has-text("{batch_id}")')).to_have_count(1)
    page.go_back()
    expect(page.get_by_role("heading", name="Recent Requests")).to_be_visible()
    # The keyboard's way: the bars' table picks a bar; picking it again lets it go.
    page.get_by_text("The bars as a table").click()
    pick = page.locator("table.bars tbody tr").last.get_by_role("button")
    pick.focus()
    page.keyboard.press("Enter")
    expect(page.locator("[data-chip]")).to_have_count(1)
    page.keyboard.press("Enter")
    expect(page.locator("[data-chip]")).to_have_count(0)


ADMIN_ROUTES = [
    ("GET", "/admin/config", None),
    ("PATCH", "/admin/config/BATCH_MAX_REQUESTS", {"value": 1}),
    ("DELETE", "/admin/config/BATCH_MAX_REQUESTS", None),
    ("GET", "/admin/batch/models", None),
    ("PATCH", "/admin/batch/models/sim-chat", {"max_concurrency": 0}),
    ("GET", "/admin/batch/summary", None),
    ("GET", "/admin/console/batches", None),
    ("GET", "/admin/batch/jobs/batch_x/requests", None),
    ("GET", "/admin/requests", None),
    ("GET", "/admin/request-metrics", None),
]


def test_a_user_sees_no_admin_area_and_every_route_behind_it_answers_403(
    page: Page, stack: LocalStack
) -> None:
    user = User(stack)
    sign_in(page, stack, user.key)
    expect(page.get_by_role("heading", name="Admin")).to_have_count(0)
    expect(page.get_by_role("link", name="Configuration")).to_have_count(0)
    page.goto(console(stack) + "admin/config")
    expect(page.get_by_text("Only administrators see this page.")).to_be_visible()
    base = stack.api_url.removesuffix("/v1")
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {user.key}"}, timeout=30) as http:
        for method, path, body in ADMIN_ROUTES:
            answer = http.request(method, path, json=body)
            assert answer.status_code == 403, (method, path, answer.text)
            assert answer.json()["error"]["message"], (method, path)
    # The console's own session reaches none of them either.
    csrf = page.evaluate("async () => (await (await fetch('/console/session')).json()).csrf_token")
    for method, path, body in ADMIN_ROUTES:
        answer = page.request.fetch(base + path, method=method, data=body, headers={"X-CSRF-Token": csrf})
        assert answer.status == 403, (method, path, answer.text())
    assert root(stack, ADMIN_KEY).get("/admin/config").status_code == 200


def test_the_admin_pages_have_no_serious_accessibility_violations_and_work_by_keyboard(
    browser: Browser, stack: LocalStack
) -> None:
    user = User(stack)
    batch_id = user.batch("accessible admin", [chat("a", "hi")])
    wait_status(user, batch_id, "completed")
    context = browser.new_context(bypass_csp=True, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        sign_in(page, stack, ADMIN_KEY)
        violations: dict[str, list[str]] = {}
        pages: list[tuple[str, str]] = [
            ("admin/config", "table.settings"),
            ("admin/concurrency", "table.models"),
            ("admin", "table.totals"),
            (f"admin/prompts/{batch_id}", "article.prompt"),
            (f"admin/requests?batch_id={batch_id}", "table.requests"),
            ("admin/recent", "figure.chart"),
        ]
        for path, ready in pages:
            page.goto(console(stack) + path)
            page.wait_for_selector(ready)
            page.add_script_tag(path=str(AXE))
            found: list[dict[str, Any]] = page.evaluate(
                "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
            )
            serious = [v["id"] for v in found if v["impact"] in ("serious", "critical")]
            if serious:
                violations[path] = serious
        assert not violations, violations
        # By keyboard alone: from the skip link to a setting's input, changed and saved with Enter.
        page.goto(console(stack) + "admin/config")
        page.wait_for_selector("table.settings")
        field = page.get_by_label("BATCH_QUEUED_ALERT_HOURS")
        field.focus()
        page.keyboard.press("Enter")  # submits its own form: the same value, stored
        expect(page.locator('tr[data-setting="BATCH_QUEUED_ALERT_HOURS"] [data-source]')).to_have_text(
            "stored"
        )
    finally:
        root(stack, ADMIN_KEY).delete("/admin/config/BATCH_QUEUED_ALERT_HOURS")
        context.close()
