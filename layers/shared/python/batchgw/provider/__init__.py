"""Batches run on a provider's own batch service (OpenAI's, Anthropic's) at its batch
price: the workflow's provider step (``executor``) and the services it calls (``services``).
"""
