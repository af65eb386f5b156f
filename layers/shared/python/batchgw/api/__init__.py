"""The API side: what the api function's routes call.

``auth`` (who is calling), ``batches`` (create, read, cancel, delete, list),
``results`` (results pages and output.jsonl), ``files`` and ``uploads`` (batch input
files in, result files out), ``models`` (the models a caller may use, with their batch
tier), ``params`` (query parameters, list pages, downloads) and ``shapes`` (the objects a
client sees, made from stored records).

May import: ``deps``, ``validation``, ``storage``, ``config``, ``domain``. Only the
handlers in ``functions/`` import it.
"""
