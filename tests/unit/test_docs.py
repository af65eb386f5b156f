"""The documentation holds to the code: package docstrings name their modules, the layout page
names the import contracts and their layers, the README stays a front page, and the site
builds with ``mkdocs build --strict`` (no page outside the nav, no broken link or anchor)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BATCHGW = REPO / "layers" / "shared" / "python" / "batchgw"
LAYOUT_PAGE = REPO / "docs" / "design" / "layout.md"
README_MAX_LINES = 150
LAYERS_CONTRACT = "layers"


def _packages() -> list[Path]:
    return sorted(p.parent for p in BATCHGW.glob("*/__init__.py"))


def _names(docstring: str, module: str) -> bool:
    """Whether the docstring names the module as code: ``module``, ``module.py``, or a dotted
    path ending in it (``batchgw.run.chain``), not a word of its prose ("a file")."""
    return re.search(rf"`[\w.]*\b{re.escape(module)}(\.py)?`", docstring) is not None


def _contracts() -> list[dict[str, object]]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts: list[dict[str, object]] = pyproject["tool"]["importlinter"]["contracts"]
    return contracts


@pytest.mark.parametrize("package", _packages(), ids=lambda p: p.name)
def test_every_module_of_a_package_is_named_in_its_docstring(package: Path) -> None:
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    modules = sorted(p.stem for p in package.glob("*.py") if p.name != "__init__.py")
    unnamed = [module for module in modules if not _names(docstring, module)]
    assert not unnamed, f"batchgw.{package.name}'s docstring does not name: {', '.join(unnamed)}"


def test_the_layout_page_names_every_import_contract_and_every_layer() -> None:
    page = LAYOUT_PAGE.read_text()
    contracts = _contracts()
    missing = [str(contract["name"]) for contract in contracts if str(contract["name"]) not in page]
    layers = next(contract for contract in contracts if contract.get("id") == LAYERS_CONTRACT)
    assert isinstance(layers["layers"], list)
    missing += [f"layer {layer}" for layer in layers["layers"] if layer not in page]
    assert not missing, f"{LAYOUT_PAGE.relative_to(REPO)} does not name: {missing}"


def test_the_readme_is_a_front_page() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, at most {README_MAX_LINES}"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """A page missing from the nav, a broken link or anchor, or an API reference that cannot
    be generated fails the build."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    assert (tmp_path / "site" / "use" / "reference" / "index.html").is_file()
