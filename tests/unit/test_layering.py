"""The import-layering contract (``[tool.importlinter]``) holds, and fails on a wrong-way import.

Runs ``lint-imports`` on a copy of the packages, so a wrong-way import can be added to
the copy and the contract seen to break.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

PACKAGES = {"batchgw": REPO_ROOT / "layers" / "shared" / "python" / "batchgw"} | {
    name: REPO_ROOT / name for name in ("functions", "local", "infra", "bench")
}


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("layering")
    for name, source in PACKAGES.items():
        shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(lint), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": str(lint.parent)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def add_module(root: Path, path: str, source: str) -> Path:
    module = root / path
    module.write_text(source)
    return module


def test_the_packages_keep_every_layering_contract(tree: Path) -> None:
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    contracts = len(
        tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    )
    assert f"{contracts} kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("path", "source", "contract"),
    [
        # storage reaching up into validation (what blobs once did)
        ("batchgw/storage/wrong.py", "from batchgw.validation import fail\n", "import downwards only"),
        # the run side reaching into the API side
        ("batchgw/run/wrong.py", "from batchgw.api import batches\n", "import downwards only"),
        # the domain calling AWS
        ("batchgw/domain/wrong.py", "import boto3\n", "the domain is pure"),
        # the local stack driving the run side directly
        ("local/wrong.py", "from batchgw.run import chain\n", "only the handlers"),
    ],
)
def test_a_wrong_way_import_breaks_the_contract(tree: Path, path: str, source: str, contract: str) -> None:
    module = add_module(tree, path, source)
    try:
        result = lint_imports(tree)
    finally:
        module.unlink()
    assert result.returncode != 0
    assert f"{contract}" in result.stdout and "BROKEN" in result.stdout
