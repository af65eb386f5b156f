"""What the console's browser tests share: Debian's Chromium driven by Playwright (the
fixtures), a fresh user with a key to sign in with, and screenshots under
``tests/e2e/screenshots/`` (not committed) for a reviewer to look at.

Without Chromium (``/usr/bin/chromium``, or ``BATCHGW_CHROMIUM``) the modules that import this
skip, unless ``BATCHGW_REQUIRE_BROWSER=1`` (as ``.ci/run`` sets, having installed it), when
they fail.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from local.run import LocalStack
from tests.e2e.conftest import Account
from tests.support import REPO_ROOT, wait_for

CHROMIUM = os.environ.get("BATCHGW_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).with_name("screenshots")
AXE = REPO_ROOT / "layers" / "shared" / "console" / "node_modules" / "axe-core" / "axe.min.js"
TIMEOUT_MS = 20_000

if not Path(CHROMIUM).is_file():
    if os.environ.get("BATCHGW_REQUIRE_BROWSER") == "1":
        raise RuntimeError(
            f"the console's browser tests need Chromium at {CHROMIUM} (apt-get install chromium)"
        )
    pytest.skip(f"no Chromium at {CHROMIUM}: the console's browser tests skip", allow_module_level=True)

from playwright.sync_api import Browser, Page, Playwright, expect, sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as running:
        yield running


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
    yield launched
    launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    context.set_default_timeout(TIMEOUT_MS)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert not errors, f"the page threw: {errors}"


def console(stack: LocalStack) -> str:
    return stack.api_url.removesuffix("/v1") + "/console/"


def shot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


class User:
    """A fresh user of a role, with its API key (the console signs in with it)."""

    def __init__(self, stack: LocalStack, role: str = "internal") -> None:
        self.account = Account(stack, role=role)
        made = self.account.admin.post(f"/admin/users/{self.account.id}/keys", json={})
        assert made.status_code == 200, made.text
        self.key = made.json()["key"]
        self.http = httpx.Client(
            base_url=stack.api_url, headers={"Authorization": f"Bearer {self.key}"}, timeout=30
        )

    def batch(self, name: str, requests: list[dict[str, Any]]) -> str:
        made = self.http.post("/batches", json={"requests": requests, "metadata": {"name": name}})
        assert made.status_code == 200, made.text
        return str(made.json()["id"])

    def status(self, batch_id: str) -> str:
        return str(self.http.get(f"/batches/{batch_id}").raise_for_status().json()["status"])


def sign_in(page: Page, stack: LocalStack, key: str) -> None:
    page.goto(console(stack))
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in", exact=True).click()
    expect(page.get_by_text("Signed in as")).to_be_visible()


def wait_status(user: User, batch_id: str, *statuses: str) -> None:
    wait_for(
        lambda: user.status(batch_id) in statuses, timeout=60, interval=0.2, what=f"{batch_id} {statuses}"
    )
