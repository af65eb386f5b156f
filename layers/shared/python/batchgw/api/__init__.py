"""The API side: what the api function's routes call.

- ``routes``: the public routes (``/v1/...``); ``admin_routes``: the administrators' (``/admin/...``);
- ``http``: what the two handlers share (one resolver, errors mapped once, request helpers);
- ``auth``: who is calling (an API key, or a console session);
- ``batches``: create, read, cancel, delete and list batches;
- ``reschedule``: change a batch's priority and complete_by (``PATCH``);
- ``capacity``: when a batch would end (the capacity answer, the promise at create, the
  check of a ``PATCH``'s complete_by);
- ``idempotency``: Idempotency-Key on create;
- ``retry``: a retry as a child batch, and the merged output.jsonl;
- ``results``: results pages and output.jsonl;
- ``files`` and ``uploads``: batch input files in (the Uploads API too), result files out;
- ``models``: the models a caller may use, with their batch tier;
- ``webhooks``: a user's batch webhook; ``webhook_endpoints``: the OpenAI SDK's webhook endpoints on it;
- ``accounts``: users and API keys (the admin API, a user's own profile);
- ``admin``: the operator's plane (runtime settings, model caps, routes, every user's batches);
- ``interactive``: the interactive load reports;
- ``prompts``: an administrator's read of another user's content, refused or audited;
- ``openapi``: the API's OpenAPI document;
- ``params``: query parameters, list pages, downloads;
- ``ids``: ids that carry the time they were made;
- ``shapes``: the objects a client sees, made from stored records.

May import: ``deps``, ``scheduling``, ``validation``, ``storage``, ``config``, ``domain``. Only the
handlers in ``functions/`` import it.
"""
