"""The console's server side: what its pages ask the gateway beyond the public API.

For now: what the console shows of Batch for the caller (``capabilities``,
``GET /user/batch-capabilities``), and the create page's check of a file before it is
submitted (``preflight``), also served as ``POST /v1/batches/preflight`` for any client (the
command line uses it too).

May import: ``api`` (the console is built on the API's rules, never beside them), and what
``api`` may. Only the handlers in ``functions/`` import it.
"""
