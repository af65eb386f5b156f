"""Configuration: the settings (environment and runtime overrides), the model catalog,
and the one definition of every table, queue and bucket (``resources``).

May import: ``domain``.
"""
