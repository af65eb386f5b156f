"""Batches run on a provider's own batch service (OpenAI's, Anthropic's) at its batch
price: the workflow's provider step and park (``executor``), planning a batch's parts and
the money they hold (``planning``), submitting a part and finding a lost submit again
(``submitting``), polling and collecting a part into our requests (``collecting``), the
gateway-run batch's promises a provider step keeps: owner, route, BATCH_ENABLED, a lost
provider batch, the run mark (``promises``), deleting what is left at the provider
(``cleanup``), a part's save, service and requests as these modules share them (``parts``),
and the services they call (``services``).
"""
