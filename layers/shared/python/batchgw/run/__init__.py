"""The run side: what the worker and the workflow call.

``chain`` runs a chain of a batch's requests (the worker's loop: claim, call, record;
``model_gate`` is its way to a model's slot, asking ``batchgw.scheduling`` whether it may
start, ``owner`` the owner's gate, ``stops`` says why a run stops, ``claim_ahead`` claims
its next index while a call runs, ``renewing`` keeps its leases, slot and mark alive during
a call, ``invisible`` keeps its messages invisible), ``attempt`` one
request's call (made by ``batchgw.upstream``) and what is stored after it, ``slot`` the
model slot a chain holds, ``completion`` a batch's shards and wake-up, ``lifecycle`` the
workflow's steps that run a batch (prepare, park, expire, cancel, purge), ``stopped`` the
requests of a stopped batch that will never run, ended, ``ending`` a batch's end (finalize,
fail, its event and Idempotency-Key), ``result_files`` the files a file batch ends with.

May import: ``upstream``, ``deps``, ``scheduling``, ``live_config``, ``validation`` (the
workflow validates file batches), ``storage``, ``config``, ``domain``. Only the handlers
in ``functions/`` import it.
"""
