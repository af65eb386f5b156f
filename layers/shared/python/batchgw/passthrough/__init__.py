"""The reference interactive path: one request passed straight to its model, counted as
interactive load while it runs, so batch work on the same model gives way to it.

``serve`` runs one request (``POST /v1/chat/completions``, ``/v1/embeddings``,
``/v1/responses`` or ``/v1/messages``): checked as a batch request is, refused while the
caller's quota or budget is used up (or would be, by their requests still running), sent to
any of its model's routes, charged once.
``load`` is the lease that counts it as in flight; ``reserve`` the hold of what it may cost
against the caller's quotas and budgets while it runs; ``answers`` the shapes it answers in.

May import: ``upstream``, ``deps``, ``scheduling``, ``live_config``, ``validation``,
``storage``, ``config``, ``domain``. Only the handlers in ``functions/`` import it.
"""
