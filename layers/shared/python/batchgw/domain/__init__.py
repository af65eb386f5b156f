"""The domain: what a batch and its requests are, and the rules that need no AWS.

Nothing here does I/O or reads a clock of its own: time comes in as an argument.

- ``batch``: a batch's record, its counters and keys; ``request``: one request's record;
- ``states``: the states of a batch and its requests; ``modes``: where a batch runs;
- ``outcome``: one upstream call's answer, classified; ``decisions``: what it means
  (``decisions.decide``: retry when, end how, cost what);
- ``chains``: the work queue's messages (chains and lone requests);
- ``interactive``: the batch share beside interactive traffic; ``adaptive``: backpressure
  from the upstream; ``fairness``: batches sharing a model's slots; ``health``: a process's
  view of each model's pauses and failures;
- ``shares``: tenants sharing a model's slots (weighted max-min fair, priority and deadline
  within a tenant) and the completion estimate made at create; ``contention``: the batches
  on one model's slot map, their tags, and who gives way to whom;
- ``money``: integer nano-dollars; ``spend``: spend, quotas and budgets; ``usage``: what a
  user holds against their limits; ``rates``: a key's request rate as a token bucket;
- ``results``: a result as the client reads it; ``attempts``: the request log's entries;
- ``files``: input and result files; ``accounts``: users and keys; ``principal``: who is
  calling; ``runtime``: what administrators changed at run time;
- ``provider``: a batch run on its provider's batch service, its parts;
- ``background``: a background response as the Responses API shows it, from its batch of one;
- ``webhooks``: batch and response events and their signing; ``addresses``: which addresses
  a webhook may reach;
- ``console``: what the console shows of a batch;
- ``scrub``: messages made safe to store and show; ``codec``: compact JSON encodings;
- ``errors``: the typed errors, each with its API status.

May import: the standard library, pydantic-free plain Python. Imports no other batchgw package.
"""
