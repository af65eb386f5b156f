"""The console's files: its page, its scripts and styles (``web/``), and the third-party
modules it imports (Preact, htm, and uPlot for the admin pages' charts, with its stylesheet),
served by the api function under ``/console/``.

The third-party files come from the npm registry, pinned in ``layers/shared/console``'s
``package-lock.json``: ``make install`` runs ``npm ci`` there and copies the files named in
``VENDOR`` into ``web/vendor/`` (``python -m batchgw.console.assets <node_modules>``), which
git ignores and the shared layer ships. Nothing of theirs is kept in the tree.

Every answer carries a strict Content-Security-Policy: scripts only from this origin, plus
the page's import map (which names the vendor modules, so the scripts import ``preact``,
not a path) allowed by its hash, never by ``unsafe-inline``; no inline style, no frames, no
plugins, and calls only to this origin. The page is revalidated on every load; the scripts
and styles are revalidated too (they change with each deploy and carry no version in their
names), and the vendor files, whose paths carry their pinned version, are kept a year.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

WEB = Path(__file__).with_name("web")
PREFIX = "/console"
# The vendor files: the name served (with its package's version), and the file in the package.
VENDOR = {
    "preact": ("preact", "dist/preact.mjs"),
    "preact/hooks": ("preact", "hooks/dist/hooks.mjs"),
    "htm": ("htm", "dist/htm.mjs"),
    "uplot": ("uplot", "dist/uPlot.esm.js"),
}
# The vendor stylesheets the page links, by the same scheme (their package and file).
VENDOR_STYLES = {"uplot.css": ("uplot", "dist/uPlot.min.css")}
IMPORT_MAP_MARK = "<!-- importmap -->"
STYLES_MARK = "<!-- vendor styles -->"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".json": "application/json",
}
# A path the console serves: words, dots and dashes in each part (no "..", no hidden files).
_SAFE_PATH = re.compile(r"^(?:[A-Za-z0-9_-][A-Za-z0-9._-]*/)*[A-Za-z0-9_-][A-Za-z0-9._@-]*$")
NO_CACHE = "no-cache"
FOREVER = "public, max-age=31536000, immutable"


@dataclass(frozen=True)
class Asset:
    body: str
    content_type: str
    cache_control: str


@dataclass(frozen=True)
class Vendored:
    """What ``make install`` copied: the version of each package (for the paths)."""

    versions: dict[str, str]

    def path(self, name: str) -> str:
        package, inner = VENDOR.get(name) or VENDOR_STYLES[name]
        return f"{PREFIX}/vendor/{package}@{self.versions[package]}/{inner.rsplit('/', 1)[-1]}"


@cache
def vendored() -> Vendored:
    manifest = WEB / "vendor" / "versions.json"
    if not manifest.is_file():
        raise FileNotFoundError(
            f"{manifest} is missing: run `make install` (it copies the console's modules)"
        )
    return Vendored(json.loads(manifest.read_text()))


@cache
def page() -> tuple[str, str]:
    """The console's page with its import map in place, and the map's CSP hash source."""
    vendor = vendored()
    imports = {name: vendor.path(name) for name in VENDOR}
    script = json.dumps({"imports": imports}, indent=2)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    styles = "\n  ".join(f'<link rel="stylesheet" href="{vendor.path(name)}">' for name in VENDOR_STYLES)
    html = (
        (WEB / "index.html")
        .read_text()
        .replace(IMPORT_MAP_MARK, f'<script type="importmap">{script}</script>')
        .replace(STYLES_MARK, styles)
    )
    return html, f"'sha256-{digest}'"


def content_security_policy() -> str:
    return "; ".join(
        [
            "default-src 'none'",
            f"script-src 'self' {page()[1]}",
            "style-src 'self'",
            "img-src 'self' data:",
            "connect-src 'self'",
            "font-src 'self'",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
            "object-src 'none'",
        ]
    )


def headers() -> dict[str, str]:
    """The headers of every console answer (its page, files, and its not found)."""
    return {
        "Content-Security-Policy": content_security_policy(),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
        "Cross-Origin-Opener-Policy": "same-origin",
    }


def asset(path: str) -> Asset | None:
    """The file at ``path`` under ``/console/`` (None: no such file). Every path that is
    not a file is the page itself: the page routes in the browser (``/console/batches/...``)."""
    if path.startswith("vendor/"):
        return _vendor(path.removeprefix("vendor/"))
    if path and _SAFE_PATH.match(path) and "." in path.rsplit("/", 1)[-1]:
        file = WEB / path
        kind = CONTENT_TYPES.get(file.suffix)
        if kind is None or not file.is_file() or file.name == "index.html":
            return None
        return Asset(file.read_text(), kind, NO_CACHE)
    return Asset(page()[0], CONTENT_TYPES[".html"], NO_CACHE)


def _vendor(path: str) -> Asset | None:
    vendor = vendored()
    for name, (package, inner) in [*VENDOR.items(), *VENDOR_STYLES.items()]:
        if vendor.path(name) == f"{PREFIX}/vendor/{path}":
            file = WEB / "vendor" / package / inner.rsplit("/", 1)[-1]
            return Asset(file.read_text(), CONTENT_TYPES[file.suffix], FOREVER)
    return None


def copy_vendor(node_modules: Path, into: Path = WEB / "vendor") -> dict[str, str]:
    """Copy the files ``VENDOR`` names from an ``npm ci``'s ``node_modules`` into ``into``,
    with the versions installed; answers those versions."""
    versions: dict[str, str] = {}
    if into.exists():
        shutil.rmtree(into)
    for package, inner in [*VENDOR.values(), *VENDOR_STYLES.values()]:
        source = node_modules / package / inner
        if not source.is_file():
            raise FileNotFoundError(f"{source} is missing: is {package} installed (npm ci)?")
        versions[package] = json.loads((node_modules / package / "package.json").read_text())["version"]
        target = into / package / source.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    (into / "versions.json").write_text(json.dumps(versions, indent=2) + "\n")
    return versions


if __name__ == "__main__":
    found = copy_vendor(Path(sys.argv[1]))
    print("console modules:", ", ".join(f"{name}@{version}" for name, version in sorted(found.items())))
