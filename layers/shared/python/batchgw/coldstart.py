"""A handler's cold start: no garbage collection while its modules load.

Every object the imports make lives as long as the execution environment, and each full
collection during the imports walks all of them again: on the api function that was a
fifth of its import and of its first request (``docs/design/cold-start.md``). A handler
calls ``loading()`` before its first import and ``loaded()`` after its last; what the
imports made is then frozen out of every later collection's walk.

Imports nothing but ``gc``: it runs before anything else a handler loads.
"""

from __future__ import annotations

import gc


def loading() -> None:
    gc.disable()


def loaded() -> None:
    gc.freeze()
    gc.enable()
