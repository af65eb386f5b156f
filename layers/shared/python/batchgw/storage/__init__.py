"""Storage: the AWS adapters, one per aggregate, over one small DynamoDB kernel.

``dynamo`` is the kernel (values, update expressions, pagination, conditional writes,
transactions); ``batches``, ``requests``, ``slots``, ``files``, ``control`` are the
DynamoDB adapters; ``blobs`` (S3), ``queue`` (SQS) and ``workflow`` (Step Functions) the
others; ``aws`` makes the clients. ``batches``' store is made of parts, a module each:
``batch_records`` (the record's reads and named verbs), ``batch_shards`` (its counter
shards), ``batch_runs`` (its run marks), ``batch_prepare`` (prepare's lease) and
``batch_index`` (the owner index). Records come out typed (``domain``); SDK errors end
here, as results or ``StorageError``.

May import: ``domain``.
"""
