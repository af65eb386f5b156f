"""The api function's cold start leaves out what its common requests do not need: importing
``functions.api.handler`` in a fresh interpreter loads none of the modules its routes load on
their own first request (the integration tests of those routes prove they still answer)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support import REPO_ROOT

# Loaded by the route that needs them, on its first request.
DEFERRED = (
    "batchgw.api.webhook_endpoints",  # the OpenAI SDK's webhook endpoints
    "batchgw.api.results",  # a batch's results
    "batchgw.api.retry",  # retries and merged output
    "batchgw.api.openapi",  # the API's description
    "batchgw.console.batches",  # the console's Batches page
    "batchgw.console.assets",  # the console's files
    "batchgw.console.preflight",  # a file's check before it is submitted
    "batchgw.console.capabilities",  # what the console shows of Batch
    "batchgw.validation.file",  # a batch input file's validation
)


def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    paths = [str(REPO_ROOT / "layers" / "shared" / "python"), str(REPO_ROOT)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def test_importing_the_api_handler_loads_no_module_only_other_routes_need() -> None:
    loaded = modules_after("import functions.api.handler")
    assert "batchgw.api.batches" in loaded  # the routes are registered at import
    assert sorted(loaded & set(DEFERRED)) == []


# Built on their first use (``batchgw.deps``): the api's common requests never touch them.
NOT_WIRED_AT_IMPORT = (
    "batchgw.scheduling.share",  # the worker's scheduling
    "batchgw.scheduling.room",
    "batchgw.scheduling.backpressure",
    "batchgw.scheduling.pacing",
    "batchgw.storage.interactive",
    "batchgw.storage.reqlog",
    "batchgw.storage.sealer",
)


def test_importing_the_api_handler_builds_no_adapter_and_loads_no_scheduling() -> None:
    loaded = modules_after("import functions.api.handler")
    assert sorted(loaded & set(NOT_WIRED_AT_IMPORT)) == []


HANDLERS = ("admin", "api", "interactive", "lifecycle", "webhooks", "worker")


def test_every_handler_collects_garbage_again_once_loaded_with_what_it_loaded_frozen() -> None:
    for name in HANDLERS:
        code = (
            f"import functions.{name}.handler, gc\n"
            "assert gc.isenabled(), 'collection left off'\n"
            "assert gc.get_freeze_count() > 1000, gc.get_freeze_count()"
        )
        assert "functions" in modules_after(code), name
