"""batchgw: the batch-inference API of an LLM gateway, on AWS serverless.

The packages are the architecture; each says in its docstring what it may import, and
``make lint`` (import-linter, ``[tool.importlinter]`` in pyproject.toml) enforces it:

- ``domain``      pure: records, states, decisions, money, errors. Imports no other package.
- ``config``      settings, the model catalog, the resource specs. → domain
- ``storage``     AWS adapters over one small DynamoDB kernel; SDK errors end here. → domain
- ``validation``  pure checks of bodies and files, per target. → domain, config
- ``live_config`` the live configuration: settings, stored overrides, model caps. → storage, config, domain
- ``scheduling``  may a chain start a request on a model now (admission, share, room, backpressure,
                  pacing, ``Tuning``). → storage, config, domain; no HTTP client, no Powertools
- ``deps``        wiring: the adapters a handler uses, built once per process. → scheduling, live_config,
                  storage, config, domain
- ``api``         what the api function calls. → deps, validation, storage, config, domain
- ``run``         what the worker and the workflow call. → deps, validation, storage, config, domain
- ``passthrough`` the reference interactive path: one request passed straight to its model.
- ``upstream``    calling a model: its routes, one request sent, its answer classified.
- ``inputs``      a batch's own copy of its input, read back from S3. → deps, validation, storage, domain
- ``outbound``    POSTs to addresses users give (webhook events), signed, public addresses only.
- ``console`` and ``provider``: the console's pages; batches run on a provider's batch service.

Outside the layers: ``observability`` (logs, metrics and traces, one of each per process),
``coldstart`` (no garbage collection while a handler's modules load; imports only ``gc``) and
``first_admin`` (an entry point: the first administrator of a deployed stack and their key).

Nothing imports ``api`` or ``run`` but the handlers in ``functions/`` (and tests).
"""
