"""Blocking AWS calls, run off the worker's event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")


async def io(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking call (boto3) in a thread, so the loop keeps serving other chains."""
    return await asyncio.to_thread(partial(fn, *args, **kwargs))
