"""The domain: what a batch and its requests are, and the rules that need no AWS.

Records (``BatchRecord``, ``RequestRecord``), their states, the pure decision of what
an attempt's outcome means (``decisions.decide``), money in integer nano-dollars, the
result line shapes and the typed errors. Nothing here does I/O or reads a clock of its
own: time comes in as an argument.

May import: the standard library, pydantic-free plain Python. Imports no other batchgw package.
"""
