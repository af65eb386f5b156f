"""batchgw: the batch-inference API of an LLM gateway, on AWS serverless.

The packages are the architecture; each says in its docstring what it may import, and
``make lint`` (import-linter, ``[tool.importlinter]`` in pyproject.toml) enforces it:

- ``domain``      pure: records, states, decisions, money, errors. Imports no other package.
- ``config``      settings, the model catalog, the resource specs. → domain
- ``storage``     AWS adapters over one small DynamoDB kernel; SDK errors end here. → domain
- ``validation``  pure checks of bodies and files, per target. → domain, config
- ``deps``        wiring: the adapters a handler uses, built once per process. → storage, config, domain
- ``api``         what the api function calls. → deps, validation, storage, config, domain
- ``run``         what the worker and the workflow call. → deps, validation, storage, config, domain

Nothing imports ``api`` or ``run`` but the handlers in ``functions/`` (and tests).
"""
