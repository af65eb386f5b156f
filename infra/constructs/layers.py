"""The Lambda layers every function shares: the ``batchgw`` code, its third-party
dependencies, and the operator's models config document.
"""

from __future__ import annotations

import compileall
import hashlib
import py_compile
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, ILocalBundling, Names, Stage
from aws_cdk import aws_lambda as lambda_
from batchgw.config.catalog import Catalog, load_catalog
from constructs import Construct

from infra.constructs import REPO_ROOT

RUNTIME = lambda_.Runtime.PYTHON_3_12
ARCHITECTURE = lambda_.Architecture.ARM_64
PYTHON_VERSION = "3.12"  # of RUNTIME: the wheels pip picks for the dependencies layer
PIP_PLATFORM = "manylinux2014_aarch64"  # of ARCHITECTURE

# Where the functions find the models config: layers are unpacked under /opt.
MODELS_CONFIG_IN_LAYER = "config/models.json"
MODELS_CONFIG_PATH = f"/opt/{MODELS_CONFIG_IN_LAYER}"

# The dependencies layer's lock: the runtime dependencies of pyproject.toml resolved for the
# Lambda platform (PYTHON_VERSION, PIP_PLATFORM) with their hashes, at the versions of the
# development lock (``make lock``). It includes boto3 and botocore: the runtime's own copies
# change when AWS updates them, and the code relies on botocore's behaviour (its checksums),
# so the functions run the versions the tests ran (about 25 MB of the 250 MB a function and
# its layers may take unzipped). A layer's /opt/python comes before the runtime's in sys.path.
LAMBDA_LOCK = REPO_ROOT / "requirements" / "lambda.txt"

ASSET_EXCLUDES = ["**/__pycache__", "**/*.pyc", "**/.mypy_cache", "**/.pytest_cache"]


def locked_requirements(lock: Path = LAMBDA_LOCK) -> dict[str, str]:
    """The dependencies layer's packages and their pinned versions, from its lock file."""
    pins: dict[str, str] = {}
    for line in lock.read_text().splitlines():
        if line and not line[0].isspace() and not line.startswith("#") and "==" in line:
            name, version = line.split(" ", 1)[0].split(";", 1)[0].split("==", 1)
            pins[name.lower()] = version
    return pins


def runs_runtime_python() -> bool:
    """Whether this interpreter is the runtime's version, so its bytecode is the runtime's."""
    return f"{sys.version_info.major}.{sys.version_info.minor}" == PYTHON_VERSION


# Bytecode shipped in a layer: Lambda's /opt is read-only, so a layer without it compiles
# every module it imports on every cold start. Unchecked hashes: the runtime trusts the
# .pyc without comparing it with the source's timestamp (which bundling does not keep).
COMPILE_COMMAND = ["python", "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash"]


def pip_install_arguments(requirements: str, target: str, *, compile_bytecode: bool = False) -> list[str]:
    """``pip install`` of binary wheels for the Lambda platform, whatever machine runs it,
    exactly the lock file's (``--require-hashes``; ``--no-deps``: the lock lists every
    package for the Lambda platform, and pip would evaluate the packages' markers for its own
    interpreter); compiled to bytecode only where the interpreter that runs pip is the
    runtime's version."""
    return [
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--require-hashes",
        "--no-deps",
        "--compile" if compile_bytecode else "--no-compile",
        "--platform",
        PIP_PLATFORM,
        "--implementation",
        "cp",
        "--only-binary=:all:",
        "--python-version",
        PYTHON_VERSION,
        "--target",
        target,
        "--requirement",
        requirements,
    ]


def _run(command: Sequence[str]) -> int:
    # pip's chatter goes to stderr: stdout belongs to the CDK app.
    return subprocess.run(command, check=False, stdout=sys.stderr).returncode


@jsii.implements(ILocalBundling)
class LocalPipBundling:
    """Builds the dependencies layer with this interpreter's pip, without Docker.

    Returns False (so CDK falls back to the Docker image) when pip cannot do it, e.g.
    without network access to the package index.
    """

    def __init__(self, requirements: Path, run: Callable[[Sequence[str]], int] = _run) -> None:
        self._requirements = requirements
        self._run = run

    # jsii calls ``tryBundle(outputDir, options)`` with both arguments by position, though the
    # generated stub spreads the options into keywords: accept either (the options are unused).
    def try_bundle(self, output_dir: str, *_options: Any, **_keywords: Any) -> bool:
        target = str(Path(output_dir) / "python")
        arguments = pip_install_arguments(
            str(self._requirements), target, compile_bytecode=runs_runtime_python()
        )
        try:
            return self._run([sys.executable, "-m", "pip", *arguments]) == 0
        except OSError:
            return False


@jsii.implements(ILocalBundling)
class LocalCodeBundling:
    """Builds the shared code's layer without Docker: a copy of its source, with bytecode
    when this interpreter is the runtime's version (else the source alone, as before: a
    machine without Docker can still deploy, its cold starts compiling the code)."""

    def __init__(self, source: Path) -> None:
        self._source = source

    # jsii calls ``tryBundle(outputDir, options)`` with both arguments by position, though the
    # generated stub spreads the options into keywords: accept either (the options are unused).
    def try_bundle(self, output_dir: str, *_options: Any, **_keywords: Any) -> bool:
        target = Path(output_dir) / "python"
        shutil.copytree(
            self._source / "python", target, ignore=shutil.ignore_patterns(*_IGNORED), dirs_exist_ok=True
        )
        if runs_runtime_python():
            compileall.compile_dir(
                str(target),
                quiet=1,
                workers=0,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )
        else:
            print(
                f"the shared layer ships without bytecode: this is Python {sys.version_info.major}."
                f"{sys.version_info.minor}, the runtime {PYTHON_VERSION}",
                file=sys.stderr,
            )
        return True


_IGNORED = ("__pycache__", "*.pyc", ".mypy_cache", ".pytest_cache")


def load_models_config(path: Path) -> Catalog:
    """The operator's models config, validated as the functions will read it.

    Raises ValueError naming the file when it is missing or invalid, which fails the synth.
    """
    try:
        return load_catalog(path, environ={})
    except (OSError, ValueError) as exc:  # ValueError covers bad JSON and pydantic errors
        raise ValueError(f"invalid models config {path}: {exc}") from exc


class Layers(Construct):
    """The layers every function lists: third-party packages, the shared code, the models config."""

    def __init__(self, scope: Construct, construct_id: str, *, models_config: Path) -> None:
        super().__init__(scope, construct_id)
        self.catalog = load_models_config(models_config)

        self.shared = lambda_.LayerVersion(
            self,
            "Shared",
            description="batchgw: the code the functions share",
            code=self._shared_code(REPO_ROOT / "layers" / "shared"),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
        )
        self.dependencies = lambda_.LayerVersion(
            self,
            "Dependencies",
            description="batchgw: third-party packages",
            code=self._dependencies_code(LAMBDA_LOCK.read_text()),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
        )
        self.models = lambda_.LayerVersion(
            self,
            "ModelsConfig",
            description=f"batchgw: the models config, at {MODELS_CONFIG_PATH}",
            code=self._models_code(models_config),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
        )

    @property
    def all(self) -> list[lambda_.ILayerVersion]:
        return [self.dependencies, self.shared, self.models]

    def _generated_source(self, name: str, files: dict[str, bytes]) -> Path:
        """A directory of generated files to make an asset from, inside the cloud assembly.

        Not a temporary directory: an asset whose bundling is skipped points at its source.
        """
        stage = Stage.of(self)
        if stage is None:
            raise ValueError("the layers must be built inside an App")
        directory = Path(stage.outdir) / "generated" / Names.unique_id(self) / name
        shutil.rmtree(directory, ignore_errors=True)
        for relative, content in files.items():
            path = directory / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        return directory

    def _shared_code(self, source: Path) -> lambda_.Code:
        """The shared code, with its bytecode for the runtime (``COMPILE_COMMAND``)."""
        docker_command = shlex.join(["cp", "-r", "/asset-input/python", "/asset-output/python"])
        docker_command += " && " + shlex.join([*COMPILE_COMMAND, "/asset-output/python"])
        return lambda_.Code.from_asset(
            str(source),
            exclude=ASSET_EXCLUDES,
            bundling=BundlingOptions(
                image=RUNTIME.bundling_image,
                command=["bash", "-c", docker_command],
                local=LocalCodeBundling(source),
            ),
        )

    def _dependencies_code(self, text: str) -> lambda_.Code:
        source = self._generated_source("dependencies", {"requirements.txt": text.encode()})
        docker_command = shlex.join(
            ["pip", *pip_install_arguments("requirements.txt", "/asset-output/python", compile_bytecode=True)]
        )
        # The hash names what the layer is built from; CDK's own would fingerprint the
        # local bundler object, which is not stable from one run to the next.
        fingerprint = hashlib.sha256("\n".join([text, docker_command, RUNTIME.name]).encode()).hexdigest()
        return lambda_.Code.from_asset(
            str(source),
            asset_hash_type=AssetHashType.CUSTOM,
            asset_hash=fingerprint,
            bundling=BundlingOptions(
                image=RUNTIME.bundling_image,
                command=["bash", "-c", docker_command],
                local=LocalPipBundling(source / "requirements.txt"),
            ),
        )

    def _models_code(self, models_config: Path) -> lambda_.Code:
        source = self._generated_source("models-config", {MODELS_CONFIG_IN_LAYER: models_config.read_bytes()})
        return lambda_.Code.from_asset(str(source))
