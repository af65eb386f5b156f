"""Storage: the AWS adapters, one per aggregate, over one small DynamoDB kernel.

Records come out typed (``domain``); SDK errors end here, as results or ``StorageError``.

- ``dynamo``: the kernel (values, update expressions, pagination, conditional writes,
  transactions); ``aws``: the clients, made lazily; ``touches``: what each AWS call touches;
- ``batches``: the batch store, made of parts: ``batch_records`` (the record's reads and named
  verbs), ``batch_shards`` (its counter shards), ``batch_runs`` (its run marks),
  ``batch_prepare`` (prepare's lease) and ``batch_index`` (the owner index);
- ``requests``: a batch's requests and their lease-guarded changes; ``reqlog``: the request
  log and volume counts; ``provider``: the parts of a provider-run batch;
- ``slots``: concurrency slots per model and per user; ``adaptive``: each model's adaptive
  limit; ``interactive``: the interactive load reports; ``runtime``: runtime overrides;
- ``accounts``: users and API keys; ``sessions``: the console's sessions; ``audit``: the audit
  log of administrators' reads; ``sealer``: secrets sealed with KMS;
- ``spend``: what users and keys spent; ``usage``: each user's usage record; ``ratelimit``:
  each key's request bucket; ``idempotency``: the Idempotency-Keys of creates;
- ``files``: file records; ``control``: the control table's small records (uploads, counters);
- ``webhooks``: a user's webhook and its deliveries; ``dns``: name resolution, one function;
- ``blobs`` (S3), ``queue`` (SQS) and ``workflow`` (Step Functions): the other services.

May import: ``domain``.
"""
