"""Calling a model: which of its routes to try (``routing``), one request sent and its answer
classified (``client``), and a Messages request run on a chat route (``translate``).

Shared by the two ways a request reaches a model: batch work (``batchgw.run``) and the
reference interactive path (``batchgw.passthrough``).
"""
