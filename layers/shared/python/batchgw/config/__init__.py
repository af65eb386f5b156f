"""Configuration: what the gateway is configured with, and the resources it runs on.

- ``settings``: every limit, duration and resource name, as one validated model (read from
  the environment); ``overrides``: which of them an administrator may change at runtime,
  and how an override is checked;
- ``catalog``: the model catalog (names, aliases, routes, prices);
- ``resources``: the one definition of every table, queue and bucket;
- ``__main__``: runtime settings from a command line (``python -m batchgw.config``).

May import: ``domain``.
"""
