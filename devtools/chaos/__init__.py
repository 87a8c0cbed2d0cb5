"""A chaos campaign: a seeded, randomized schedule of faults against one exactly-once pipeline.

``python -m devtools.chaos`` (``make chaos``) starts a three-node Kafka cluster
(replication 3, ``min.insync.replicas=2``), writes input into several topics all along with a
transactional producer (about one transaction in ten aborted), runs eos-kafka -> transformation ->
eos-kafka on Spark in local-cluster mode in a driver process of its own, and fires faults of
fourteen kinds (``faults.KINDS``: of processes, brokers and the network) at random moments and
points of the write path. Three verifiers
(``verifiers``) check the output; the report (``report``) goes to ``chaos-<seed>.json`` and a
timeline plot.
"""
