"""The Powertools logger, one per process: every module logs through it, structured
(``logger.info("request ended", extra={...})``), so each line carries its fields."""

from __future__ import annotations

from aws_lambda_powertools import Logger

logger = Logger(service="batchgw")
