"""The console: its pages and what they ask the gateway beyond the public API.

- ``session``: signing in with an API key, kept as a server-side session (cookie + CSRF);
- ``capabilities``: what the console shows of Batch for the caller
  (``GET /user/batch-capabilities``);
- ``preflight``: the create page's strict check of a file before it is submitted, also
  served as ``POST /v1/batches/preflight`` for any client (the command line uses it too);
- ``batches``: the Batches page's rows (the groups decided in ``domain.console``), one
  batch's details, the admin tab's list, the submission, Copy as new and Export unfinished;
- ``assets``: the page's files and their third-party modules, with a strict CSP;
- ``routes``: the routes on the api function (and the admin tab's on the admin function).

May import: ``api`` and ``run`` (the console is built on their rules, never beside them),
and what they may. Only the handlers in ``functions/`` import it.
"""
