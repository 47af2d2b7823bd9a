"""Fleets: the timed suite spread over several GPUs and machines, on schedulers that exist.

``devices``: which GPUs a launcher may use (within the caller's visible list); ``local``: one pytest
process per GPU on this machine (``perfsuite fleet local``); ``outcome``: what each shard's run
left and whether the shards may be pooled; ``slurm``: a submitit job array (optional extra ``[slurm]``).
"""
