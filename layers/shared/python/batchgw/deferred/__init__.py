"""Deferred single requests: work a caller sends one request at a time that runs as batch
work, on the batch scheduler, at the batch price.

- ``background``: background Responses (``POST /v1/responses`` with ``background``), each
  stored and run as a batch of one request;
- ``flex``: the flex tier (``service_tier: "flex"``), a single request run as batch work
  while its caller waits;
- ``routes``: background responses' routes on the api function (read, cancel, delete).
"""
