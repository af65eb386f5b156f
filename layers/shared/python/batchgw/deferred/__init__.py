"""Deferred single requests: work a caller sends one request at a time that runs as batch
work, on the batch scheduler, at the batch price.

- ``background``: background Responses (``POST /v1/responses`` with ``background``), each
  stored and run as a batch of one request;
- ``routes``: their routes on the api function (read, cancel, delete).
"""
