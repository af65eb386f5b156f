"""The console's files (``batchgw.console.assets``): what a path under /console/ serves, and
the policy every answer carries."""

from __future__ import annotations

import pytest
from batchgw.console import assets

pytestmark = pytest.mark.skipif(
    not (assets.WEB / "vendor" / "versions.json").is_file(),
    reason="make install copies the console's modules",
)


def test_a_path_that_is_no_file_serves_the_page_and_a_file_serves_itself() -> None:
    page = assets.asset("")
    assert page is not None and page.content_type.startswith("text/html") and page.cache_control == "no-cache"
    assert '<script type="importmap">' in page.body and "<!-- importmap -->" not in page.body
    assert assets.asset("batches/batch_123") == page  # the page routes in the browser
    script = assets.asset("pages/batches.js")
    assert script is not None and script.content_type.startswith("text/javascript")


@pytest.mark.parametrize(
    "path",
    ["missing.js", "../pyproject.toml", "pages/../../assets.py", ".hidden.js", "assets.py", "index.html"],
)
def test_nothing_outside_the_consoles_own_files_is_served(path: str) -> None:
    served = assets.asset(path)
    assert served is None or served == assets.asset("")  # not found, or the page itself


def test_vendor_modules_are_served_only_at_their_pinned_paths_and_kept_a_year() -> None:
    vendor = assets.vendored()
    path = vendor.path("preact").removeprefix("/console/")
    module = assets.asset(path)
    assert module is not None and module.cache_control == assets.FOREVER
    assert assets.asset("vendor/preact@0.0.1/preact.mjs") is None
    assert assets.asset("vendor/versions.json") is None


def test_the_policy_allows_only_this_origins_scripts_and_the_import_map_by_its_hash() -> None:
    policy = assets.content_security_policy()
    assert "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy
    assert f"script-src 'self' {assets.page()[1]}" in policy
    assert assets.headers()["X-Content-Type-Options"] == "nosniff"
