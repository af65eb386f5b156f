"""Powertools logger and metrics, one instance each per process."""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics

logger = Logger(service="batchgw")
metrics = Metrics(namespace="batchgw", service="batchgw")
