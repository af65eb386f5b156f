"""The console in a real browser: Debian's Chromium, headless, driven by Playwright against
the local stack, as a user sees it. Each test writes screenshots of the pages it visits
under ``tests/e2e/screenshots/`` (not committed) for a reviewer to look at.

Without Chromium (``/usr/bin/chromium``, or ``BATCHGW_CHROMIUM``) these tests skip, unless
``BATCHGW_REQUIRE_BROWSER=1`` (as ``.ci/run`` sets, having installed it), when they fail.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
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


# --- the files the console is made of -----------------------------------------------------


def test_the_console_is_served_with_a_strict_content_security_policy_and_cache_headers(
    stack: LocalStack,
) -> None:
    base = console(stack)
    with httpx.Client(timeout=10) as http:
        page_answer = http.get(base)
        assert page_answer.status_code == 200
        assert page_answer.headers["content-type"].startswith("text/html")
        policy = page_answer.headers["content-security-policy"]
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert re.search(r"script-src 'self' 'sha256-[A-Za-z0-9+/=]+'", policy)
        assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy
        assert page_answer.headers["cache-control"] == "no-cache"
        assert page_answer.headers["x-content-type-options"] == "nosniff"
        imports = json.loads(re.search(r'<script type="importmap">(.*?)</script>', page_answer.text, re.S)[1])
        for path in imports["imports"].values():
            module = http.get(base.removesuffix("/console/") + path)
            assert module.status_code == 200, path
            assert module.headers["content-type"].startswith("text/javascript")
            assert "immutable" in module.headers["cache-control"]
        script = http.get(base + "app.js")
        assert script.headers["content-type"].startswith("text/javascript")
        assert http.get(base + "style.css").headers["content-type"].startswith("text/css")
        # A page of the console's own routing is the page; a missing file or an API path is not.
        assert http.get(base + "batches/batch_x").text == page_answer.text
        assert http.get(base + "missing.js").status_code == 404
        assert http.get(base + "api/unknown").status_code in (401, 404)
        assert http.get(base.removesuffix("/"), follow_redirects=False).status_code == 308


# --- signing in, the list, filters and search ---------------------------------------------


def test_signing_in_shows_the_users_batches_filtered_by_group_and_found_by_name(
    page: Page, stack: LocalStack
) -> None:
    user = User(stack)
    done = user.batch("nightly summaries", [chat("a", "hello"), chat("b", "there")])
    cancelled = user.batch("slow reindex", [chat(f"s{i}", "slow [[sim latency_ms=3000]]") for i in range(40)])
    user.http.post(f"/batches/{cancelled}/cancel").raise_for_status()
    wait_status(user, done, "completed")
    wait_status(user, cancelled, "cancelled")

    sign_in(page, stack, user.key)
    rows = page.locator("table.batches tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator(f'tr[data-batch="{done}"] [data-group]')).to_have_text("Completed")
    expect(page.locator(f'tr[data-batch="{cancelled}"] [data-group]')).to_have_text("Cancelled")
    shot(page, "batches-list")

    page.get_by_role("button", name="Cancelled", exact=True).click()
    expect(rows).to_have_count(1)
    expect(page.locator(f'tr[data-batch="{cancelled}"]')).to_be_visible()
    page.get_by_role("button", name="All", exact=True).click()
    expect(rows).to_have_count(2)
    page.get_by_label("Search by name or ID").fill("NIGHTLY")
    page.get_by_role("button", name="Search", exact=True).click()
    expect(rows).to_have_count(1)
    expect(page.locator(f'tr[data-batch="{done}"]')).to_be_visible()
    # The key never reaches the page's storage; the page shows its prefix only.
    stored = page.evaluate(
        "JSON.stringify({...localStorage}) + JSON.stringify({...sessionStorage}) + document.cookie"
    )
    assert user.key not in stored and user.key not in page.content()


def test_the_list_pages_on_the_server(stack: LocalStack) -> None:
    user = User(stack)
    made = [user.batch(f"batch {i}", [chat("a", "hi")]) for i in range(5)]
    seen: list[str] = []
    after = None
    while True:
        query = {"limit": "2", **({"after": after} if after else {})}
        answer = user.http.get(stack.api_url.removesuffix("/v1") + "/console/api/batches", params=query)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        assert len(page["data"]) <= 2
        seen += [row["id"] for row in page["data"]]
        if not page["has_more"]:
            break
        after = page["next_after"]
    assert seen == list(reversed(made))


# --- one batch: progress, download, cancel, delete ----------------------------------------


def test_a_running_batchs_page_follows_it_to_completed_and_downloads_its_results(
    page: Page, stack: LocalStack
) -> None:
    user = User(stack)
    batch_id = user.batch("watched", [chat(f"r{i}", f"r{i} [[sim latency_ms=400]]") for i in range(12)])
    sign_in(page, stack, user.key)
    page.locator(f'tr[data-batch="{batch_id}"] a').click()
    expect(page.get_by_role("heading", name="watched")).to_be_visible()
    expect(page.locator("progress")).to_be_visible()
    shot(page, "batch-running")
    expect(page.locator("[data-group]")).to_have_text("Completed", timeout=60_000)
    expect(page.locator("progress")).to_have_attribute("value", "12")
    shot(page, "batch-completed")
    with page.expect_download() as download:
        page.get_by_role("link", name="Download results").click()
    lines = Path(download.value.path()).read_text().splitlines()
    assert sorted(json.loads(line)["custom_id"] for line in lines) == sorted(f"r{i}" for i in range(12))


def test_cancel_and_delete_from_the_batch_page(page: Page, stack: LocalStack) -> None:
    user = User(stack)
    batch_id = user.batch("to cancel", [chat(f"s{i}", "slow [[sim latency_ms=2000]]") for i in range(30)])
    wait_status(user, batch_id, "in_progress")
    sign_in(page, stack, user.key)
    page.goto(console(stack) + f"batches/{batch_id}")
    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete batch", exact=True).click()
    # Running requests: the refusal says why (409), and nothing is lost.
    expect(page.get_by_role("alert")).to_contain_text("cancel it")
    page.get_by_role("button", name="Cancel batch", exact=True).click()
    expect(page.locator("[data-group]")).to_have_text("Cancelled", timeout=60_000)
    shot(page, "batch-cancelled")
    page.get_by_role("button", name="Delete batch", exact=True).click()
    expect(page.get_by_role("heading", name="Batches", exact=True)).to_be_visible()
    assert user.http.get(f"/batches/{batch_id}").status_code == 404


def test_the_batch_page_shows_its_priority_and_changes_it_and_its_complete_by(
    page: Page, stack: LocalStack
) -> None:
    user = User(stack)
    batch_id = user.batch("urgent", [chat(f"p{i}", "slow [[sim latency_ms=2000]]") for i in range(30)])
    sign_in(page, stack, user.key)
    page.goto(console(stack) + f"batches/{batch_id}")
    expect(page.locator("[data-priority]")).to_have_text("0")
    expect(page.locator("[data-complete-by]")).to_contain_text("No time set")
    page.get_by_role("button", name="Change priority", exact=True).click()
    page.get_by_label("Priority").fill("11")
    page.get_by_role("button", name="Save", exact=True).click()
    # Outside a user's range: the server's refusal, in its words; nothing changed.
    expect(page.get_by_role("alert")).to_contain_text("from -10 to 10")
    in_an_hour = page.evaluate(
        "() => { const d = new Date(Date.now() + 3600e3);"
        " d.setMinutes(d.getMinutes() - d.getTimezoneOffset()); return d.toISOString().slice(0, 16); }"
    )
    page.get_by_label("Priority").fill("7")
    page.get_by_label("Complete by").fill(in_an_hour)
    shot(page, "batch-priority")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator("[data-priority]")).to_have_text("7")
    expect(page.locator("[data-complete-by]")).not_to_contain_text("No time set")
    stored = user.http.get(f"/batches/{batch_id}").json()
    assert stored["priority"] == 7 and abs(stored["complete_by"] - (time.time() + 3600)) < 120
    user.http.post(f"/batches/{batch_id}/cancel").raise_for_status()


# --- the create wizard --------------------------------------------------------------------


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def _line(custom_id: str, content: str = "hi", **body: Any) -> dict[str, Any]:
    """A file's line with no url: the create page recognises Chat from its body."""
    return {
        "custom_id": custom_id,
        "body": {"model": "sim-chat", "messages": [{"role": "user", "content": content}], **body},
    }


def _through_the_wizard(page: Page, source: Path, name: str, **fields: str) -> None:
    """Upload ``source`` on the create page, name it, fill ``fields`` (by label), and check."""
    page.get_by_label("JSONL file").set_input_files(str(source))
    page.get_by_role("button", name="Upload", exact=True).click()
    page.get_by_role("button", name="Next: configure", exact=True).click()
    page.get_by_label("Name", exact=True).fill(name)
    for label, value in fields.items():
        page.get_by_label(label).fill(value)
    page.get_by_role("button", name="Next: check", exact=True).click()


def test_the_create_wizard_names_the_failing_line_then_submits_a_fixed_file(
    page: Page, stack: LocalStack, tmp_path: Path
) -> None:
    user = User(stack)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(_jsonl([_line("one"), _line("two", "secret words", max_completion_tokens=5)]))
    sign_in(page, stack, user.key)
    page.get_by_role("link", name="Create batch").first.click()
    page.get_by_label("JSONL file").set_input_files(str(bad))
    page.get_by_role("button", name="Upload", exact=True).click()
    expect(page.get_by_text("Chat Completions requests")).to_be_visible()
    shot(page, "create-upload")
    page.get_by_role("button", name="Next: configure", exact=True).click()
    page.get_by_label("Name", exact=True).fill("wizard batch")
    page.get_by_label("Temperature").fill("0.5")
    shot(page, "create-configure")
    page.get_by_role("button", name="Next: check", exact=True).click()
    problem = page.locator('table.problems tr[data-line="2"]')
    expect(problem).to_contain_text("two")
    expect(problem).to_contain_text("max_completion_tokens")
    assert "secret words" not in page.content()
    expect(page.get_by_role("button", name="Submit batch", exact=True)).to_be_disabled()
    with page.expect_download() as download:
        page.get_by_role("button", name="Download as CSV", exact=True).click()
    assert "max_completion_tokens" in Path(download.value.path()).read_text()
    shot(page, "create-check-failed")

    good = tmp_path / "good.jsonl"
    good.write_bytes(_jsonl([_line(f"g{i}") for i in range(3)]))
    page.get_by_role("button", name="Back", exact=True).click()
    page.get_by_role("button", name="Back", exact=True).click()
    _through_the_wizard(page, good, "wizard batch", Temperature="0.5", Priority="3")
    expect(page.get_by_text("Every line passed the check: 3 requests.")).to_be_visible()
    expect(page.locator("pre")).to_contain_text('"temperature":0.5')
    shot(page, "create-check-passed")
    page.get_by_role("button", name="Submit batch", exact=True).click()
    expect(page.get_by_role("heading", name="wizard batch")).to_be_visible()
    batch_id = page.url.rsplit("/", 1)[-1]
    expect(page.locator("[data-priority]")).to_have_text("3")  # the Configure step's priority
    wait_status(user, batch_id, "completed")
    stored = user.http.get(f"/batches/{batch_id}/results").json()["data"]
    assert len(stored) == 3
    # The uploaded files are listed on the create page, and deletable.
    page.get_by_role("link", name="Create batch").first.click()
    expect(page.locator("tr[data-file]")).to_have_count(2)
    page.on("dialog", lambda dialog: dialog.accept())
    page.locator("tr[data-file]").first.get_by_role("button", name=re.compile("^Delete")).click()
    expect(page.locator("tr[data-file]")).to_have_count(1)


def test_the_create_wizard_counts_every_problem_past_those_it_lists(
    page: Page, stack: LocalStack, tmp_path: Path
) -> None:
    """The check lists 1,000 problems and counts the rest: the page says the true count,
    shows the first rows and how many more there are."""
    user = User(stack)
    bad = tmp_path / "many.jsonl"
    bad.write_bytes(_jsonl([_line(f"r{i}", max_completion_tokens=5) for i in range(1003)]))
    sign_in(page, stack, user.key)
    page.get_by_role("link", name="Create batch").first.click()
    _through_the_wizard(page, bad, "many problems")
    expect(page.get_by_role("alert")).to_contain_text("The file has 1,003 problems")
    expect(page.locator("table.problems tbody tr")).to_have_count(200)
    expect(page.locator("p.problems-more")).to_have_text(
        "The first 200 are listed, and 803 more (the downloads list the first 1,000)."
    )
    expect(page.get_by_role("button", name="Submit batch", exact=True)).to_be_disabled()


def test_a_submission_whose_answer_was_lost_finds_its_batch_after_a_reload(
    page: Page, stack: LocalStack, tmp_path: Path
) -> None:
    user = User(stack)
    source = tmp_path / "lines.jsonl"
    source.write_bytes(_jsonl([_line("x")]))
    sign_in(page, stack, user.key)
    page.goto(console(stack) + "create")
    _through_the_wizard(page, source, "lost answer")
    expect(page.get_by_text("Every line passed the check")).to_be_visible()

    reached: list[str] = []

    def lose_the_answers(route: Any) -> None:
        if not reached:
            reached.append(route.fetch().json()["id"])  # the gateway makes the batch...
        route.abort()  # ...and no answer reaches the page (its own retry is lost too)

    page.route("**/console/api/batches", lose_the_answers)
    page.get_by_role("button", name="Submit batch", exact=True).click()
    expect(page.get_by_role("heading", name="A submission is waiting for its answer")).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text("could not be reached")
    page.unroute("**/console/api/batches")
    shot(page, "create-pending")
    page.reload()
    expect(page.get_by_role("heading", name="lost answer")).to_be_visible()
    assert page.url.endswith(reached[0])
    names = [
        b
        for b in user.http.get("/batches").json()["data"]
        if (b["metadata"] or {}).get("name") == "lost answer"
    ]
    assert len(names) == 1


# --- who sees what ------------------------------------------------------------------------


def test_below_the_minimum_role_there_is_no_create_button_and_the_page_says_why(
    page: Page, stack: LocalStack
) -> None:
    user = User(stack, role="free")
    sign_in(page, stack, user.key)
    expect(page.get_by_text("cannot submit batches")).to_be_visible()
    expect(page.get_by_role("link", name="Create batch")).to_have_count(0)
    shot(page, "batches-free-role")


def test_with_batch_disabled_there_is_no_link_and_the_page_says_batch_is_not_available(
    page: Page, stack: LocalStack
) -> None:
    user = User(stack)
    user.batch("kept", [chat("a", "hi")])
    admin = root(stack, "sk-local-admin")
    admin.patch("/admin/config/BATCH_ENABLED", json={"value": False}).raise_for_status()
    try:
        wait_for(
            lambda: user.http.get("/batches").status_code != 200,
            timeout=30,
            interval=0.2,
            what="BATCH_ENABLED off",
        )
        sign_in(page, stack, user.key)
        expect(page.get_by_text("Batch is not available")).to_be_visible()
        expect(page.get_by_role("link", name="Batches")).to_have_count(0)
        shot(page, "batch-disabled")
    finally:
        admin.delete("/admin/config/BATCH_ENABLED").raise_for_status()
        wait_for(
            lambda: user.http.get("/batches").status_code == 200, timeout=30, interval=0.2, what="Batch back"
        )


def test_a_state_changing_call_without_the_csrf_header_is_refused(page: Page, stack: LocalStack) -> None:
    user = User(stack)
    batch_id = user.batch("csrf target", [chat(f"s{i}", "slow [[sim latency_ms=2000]]") for i in range(10)])
    sign_in(page, stack, user.key)
    # The session's cookie goes along, but a forged call has no CSRF token to send.
    refused = page.request.post(stack.api_url + f"/batches/{batch_id}/cancel")
    assert refused.status == 403
    assert refused.json()["error"]["code"] == "csrf_failed"
    assert user.status(batch_id) not in ("cancelling", "cancelled")


def test_the_background_responses_page_lists_the_users_responses_with_their_status(
    page: Page, stack: LocalStack
) -> None:
    user = User(stack)
    made = [
        user.http.post("/responses", json={"model": "sim-chat", "input": text, "background": True}).json()[
            "id"
        ]
        for text in ("first", "[[sim status=400]] refused")
    ]
    for response_id in made:
        wait_for(
            lambda response_id=response_id: (
                user.http.get(f"/responses/{response_id}").json()["status"] in ("completed", "failed")
            ),
            timeout=60,
            what=f"{response_id} to end",
        )
    sign_in(page, stack, user.key)
    page.get_by_role("link", name="Background responses").click()
    rows = page.locator("table.responses tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator(f'tr[data-response="{made[0]}"] [data-status]')).to_have_text("completed")
    expect(page.locator(f'tr[data-response="{made[1]}"] [data-status]')).to_have_text("failed")
    expect(page.locator(f'tr[data-response="{made[1]}"]')).to_contain_text("simulated error 400")
    shot(page, "background-responses")


def test_the_console_pages_have_no_serious_accessibility_violations(
    browser: Browser, stack: LocalStack
) -> None:
    user = User(stack)
    batch_id = user.batch("accessible", [chat("a", "hi")])
    wait_status(user, batch_id, "completed")
    # axe-core is injected as a script of its own: a test's, past the page's policy.
    context = browser.new_context(bypass_csp=True, viewport={"width": 390, "height": 844})
    page = context.new_page()
    try:
        sign_in(page, stack, user.key)
        violations: dict[str, list[str]] = {}
        for path, ready in (
            ("", "table.batches"),
            (f"batches/{batch_id}", "progress"),
            ("create", "#file"),
            ("responses", "table.responses"),
        ):
            page.goto(console(stack) + path)
            page.wait_for_selector(ready)
            page.add_script_tag(path=str(AXE))
            found = page.evaluate(
                "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
            )
            serious = [v["id"] for v in found if v["impact"] in ("serious", "critical")]
            if serious:
                violations[path or "batches"] = serious
            shot(page, f"narrow-{(path or 'batches').replace('/', '-')[:20]}")
        assert not violations, violations
        # Keyboard use: the first Tab reaches the skip link, which moves the focus to the content.
        page.goto(console(stack))
        page.wait_for_selector("table.batches")
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    finally:
        context.close()


def test_a_submission_without_an_answer_for_a_day_asks_before_submitting_again(
    page: Page, stack: LocalStack
) -> None:
    user = User(stack)
    sign_in(page, stack, user.key)
    two_days_ago = "Date.now() - 2 * 24 * 3600 * 1000"
    page.evaluate(
        "localStorage.setItem('batchgw.console.pending-submission', JSON.stringify({key: 'k-old', "
        f"started_at: {two_days_ago}, body: {{name: 'old one', input_file_id: 'file-x', check: 'c'}}}}))"
    )
    sent: list[str] = []
    page.on(
        "request", lambda request: sent.append(request.url) if "/console/api/batches" in request.url else None
    )
    page.goto(console(stack) + "create")
    expect(page.get_by_role("alert")).to_contain_text("can no longer be sure")
    expect(page.get_by_role("button", name="Submit again as a new batch")).to_be_visible()
    shot(page, "create-pending-stale")
    assert sent == []  # nothing is sent again on its own
    page.get_by_role("button", name="Forget it").click()
    expect(page.get_by_label("JSONL file")).to_be_visible()


def test_export_unfinished_and_copy_as_new_open_the_create_page_on_that_file(
    page: Page, stack: LocalStack, tmp_path: Path
) -> None:
    user = User(stack)
    source = tmp_path / "lines.jsonl"
    source.write_bytes(_jsonl([_line("ok"), _line("bad", "[[sim status=400]]")]))
    sign_in(page, stack, user.key)
    page.goto(console(stack) + "create")
    _through_the_wizard(page, source, "half fails", max_tokens="9")
    page.get_by_role("button", name="Submit batch", exact=True).click()
    expect(page.locator("[data-group]")).to_have_text("With issues", timeout=60_000)
    page.get_by_role("button", name="Export unfinished requests").click()
    expect(page.get_by_role("status").filter(has_text="Exported 1 unfinished")).to_be_visible()
    shot(page, "batch-exported")
    page.get_by_role("link", name="Fix and submit them as a new batch").click()
    expect(page.locator(".info strong")).to_have_text("half fails unfinished.jsonl")
    page.go_back()
    page.get_by_role("link", name="Copy as new batch").click()
    expect(page.locator(".info strong")).to_have_text("lines.jsonl")
    page.get_by_role("button", name="Next: configure", exact=True).click()
    expect(page.get_by_label("Name", exact=True)).to_have_value("Copy of half fails")
    expect(page.get_by_label("max_tokens")).to_have_value("9")
    shot(page, "create-copy")


def test_the_webhook_page_sets_up_rotates_and_removes_the_webhook(page: Page, stack: LocalStack) -> None:
    user = User(stack)
    admin = root(stack, "sk-local-admin")
    # The receiver is on this machine: an isolated test deployment's setting.
    admin.patch("/admin/config/BATCH_WEBHOOK_ALLOW_PRIVATE_TARGETS", json={"value": True}).raise_for_status()
    try:
        wait_for(
            lambda: (
                user.http.put("/batch_webhook", json={"url": "http://127.0.0.1:9/hook"}).status_code == 200
            ),
            timeout=30,
            interval=0.2,
            what="private targets allowed",
        )
        user.http.delete("/batch_webhook").raise_for_status()
        sign_in(page, stack, user.key)
        page.get_by_role("link", name="Webhook").click()
        expect(page.get_by_text("You have no batch webhook.")).to_be_visible()
        page.get_by_label("Webhook URL").fill("http://127.0.0.1:9/hook")
        page.get_by_role("button", name="Set up webhook").click()
        first = page.locator("[data-secret]")
        expect(first).to_contain_text("whsec_")
        secret = first.inner_text()
        page.get_by_role("button", name="Rotate secret").click()
        expect(page.locator("[data-secret]")).not_to_have_text(secret)
        shot(page, "webhook")
        page.on("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Remove webhook").click()
        expect(page.get_by_text("You have no batch webhook.")).to_be_visible()
        assert user.http.get("/batch_webhook").status_code == 404
    finally:
        admin.delete("/admin/config/BATCH_WEBHOOK_ALLOW_PRIVATE_TARGETS").raise_for_status()


# --- a batch that did not succeed: what happened, what to do, Retry -----------------------


def test_a_refused_file_batch_names_its_lines_and_offers_no_results_or_retry(
    page: Page, stack: LocalStack
) -> None:
    user = User(stack)
    lines = [
        {"custom_id": "ok", "method": "POST", "url": "/v1/chat/completions", "body": _line("ok")["body"]},
        {"custom_id": "no-body", "method": "POST", "url": "/v1/chat/completions"},
    ]
    made = user.http.post(
        "/files", files={"file": ("refused.jsonl", _jsonl(lines))}, data={"purpose": "batch"}
    )
    assert made.status_code == 200, made.text
    created = user.http.post(
        "/batches",
        json={
            "input_file_id": made.json()["id"],
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        },
    )
    assert created.status_code == 200, created.text
    batch_id = created.json()["id"]
    wait_status(user, batch_id, "failed")

    sign_in(page, stack, user.key)
    row = page.locator(f'tr[data-batch="{batch_id}"]')
    expect(row.locator("[data-group]")).to_have_text("With issues")
    expect(row).to_contain_text("Its input file was refused")
    expect(row).not_to_contain_text("none yet")
    row.locator("a").click()
    issue = page.locator("[data-issue]")
    expect(issue).to_contain_text("Its input file was refused: nothing ran")
    expect(issue.locator("li")).to_contain_text("Line 2")
    expect(issue).to_contain_text("Fix these lines in your file, then upload it again")
    expect(page.get_by_role("link", name="Download results")).to_have_count(0)
    expect(page.get_by_role("button", name="Retry batch")).to_have_count(0)  # nothing to run again
    expect(page.get_by_text("No results file was written for this batch")).to_be_visible()
    assert not re.search(r"[A-Z][a-z]+(Error|Exception)\b", issue.inner_text())
    shot(page, "batch-failed-refused")


def test_a_batch_failed_by_a_revoked_key_says_why_and_retry_creates_its_retry(
    page: Page, stack: LocalStack
) -> None:
    user = User(stack)  # the console signs in with its second key; the first creates the batch
    batch = user.account.api.create([chat(f"k{i}", f"k{i} [[sim latency_ms=1000]]") for i in range(40)])
    assert batch.status_code == 200, batch.text
    batch_id = batch.json()["id"]
    wait_for(
        lambda: user.http.get(f"/batches/{batch_id}").json()["request_counts"]["completed"] >= 1,
        timeout=60,
        interval=0.2,
        what="a request to finish",
    )
    user.account.admin.post(f"/admin/keys/{user.account.key_id}/revoke").raise_for_status()
    wait_status(user, batch_id, "failed")

    sign_in(page, stack, user.key)
    page.goto(console(stack) + f"batches/{batch_id}")
    issue = page.locator("[data-issue]")
    expect(issue).to_contain_text("the API key or account that created it may no longer run batches")
    expect(issue).to_contain_text("Retry the batch to run the others under your current API key")
    assert not re.search(r"[A-Z][a-z]+(Error|Exception)\b", issue.inner_text())
    shot(page, "batch-failed-owner")
    page.get_by_role("button", name="Retry batch", exact=True).click()
    started = page.get_by_role("status").filter(has_text="Retry started")
    expect(started).to_be_visible()
    children = user.http.get(f"/batches/{batch_id}").json()["retry_batch_ids"]
    assert len(children) == 1
    expect(started.get_by_role("link", name=children[0])).to_be_visible()
    expect(page.locator("dl.facts:not([data-schedule])")).to_contain_text(children[0])  # Retried by
    child = user.http.get(f"/batches/{children[0]}").json()
    assert child["parent_batch_id"] == batch_id
    assert (
        child["request_counts"]["total"]
        == 40 - user.http.get(f"/batches/{batch_id}").json()["request_counts"]["completed"]
    )
    wait_status(user, children[0], "completed")
    shot(page, "batch-retried")
