"""Storage: the AWS adapters, one per aggregate, over one small DynamoDB kernel.

``dynamo`` is the kernel (values, update expressions, pagination, conditional writes,
transactions); ``batches``, ``requests``, ``slots``, ``files``, ``control`` are the
DynamoDB adapters; ``blobs`` (S3), ``queue`` (SQS) and ``workflow`` (Step Functions) the
others; ``aws`` makes the clients. Records come out typed (``domain``); SDK errors end
here, as results or ``StorageError``.

May import: ``domain``.
"""
