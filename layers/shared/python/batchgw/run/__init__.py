"""The run side: what the worker and the workflow call.

- ``chain``: the worker's loop over a chain of a batch's requests (claim, call, record), with
  ``model_gate`` (its way to a model's slot, asking ``batchgw.scheduling``), ``owner`` (the
  owner's gate), ``stops`` (why a run stops), ``claim_ahead`` (its next index claimed while a
  call runs), ``renewing`` (its leases, slot and mark kept alive during a call), ``hand_on``
  (its continuation, its retries' messages and its splits' new chains, sent or run beside
  it), ``invisible`` (its messages kept invisible) and ``aio`` (blocking AWS calls in two
  lanes of threads);
- ``attempt``: one request's call (made by ``batchgw.upstream``) and what is stored after it;
- ``charges``: what an attempt's shard keeps, rolled up into its payer's spend;
- ``slot``: the model slot a chain holds; ``completion``: a batch's shards and wake-up;
- ``lifecycle``: the workflow's steps (prepare, park, expire, cancel, purge), with
  ``prepare_lease`` (the lease a prepare holds while it writes a batch's requests);
- ``reconcile``: every unfinished batch looked at again, its lost work re-sent;
- ``stopped``: the requests of a stopped batch that will never run, ended;
- ``ending``: a batch's end (finalize, fail, its event and Idempotency-Key);
- ``result_files``: the files a batch ends with; ``webhooks``: its events delivered.

May import: ``upstream``, ``deps``, ``scheduling``, ``live_config``, ``validation`` (the
workflow validates file batches), ``storage``, ``config``, ``domain``. Only the handlers
in ``functions/`` import it.
"""
