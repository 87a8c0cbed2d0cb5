"""The driver-crash loop (``make driver-crashes``): an update-mode aggregation through foreachBatch
into eos-kafka, its driver killed twice at random moments, checked right after its last run."""
