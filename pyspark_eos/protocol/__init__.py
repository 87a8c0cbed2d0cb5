"""The exactly-once protocol that the source and the sink share, and nothing else.

The source plans a batch and hands each task's ranges to the sink; the sink commits them with the
task's records in one Kafka transaction, under the group membership the plan was made in, after
showing that no other attempt of the task may commit them. What travels between the two, and
where it is kept:

| record | module | written by | read by |
| --- | --- | --- | --- |
| offset range [start, end) of a partition | offset_range | the driver's planner (source) | the task's read() and write() |
| group stamp (generation, member, run token) | group_stamp | the driver's group membership (source), on every input partition | the write task, which commits under it |
| plan record (claims topic; a named pipeline's control log, claims_layout) | claims_records, claims_log | the driver, per plan of a batch (source planner; sink writer for progress plans) | every attempt of the plan's tasks: where its claims start |
| stamp record (claims topic) | claims_records, claims_log | the driver, per new generation of its membership | write tasks of an older generation's plan (sink/rebalance) |
| claim, release (claims topic) | claims_records, claims_log | each write task attempt, before its stable read / once its transaction ended | the later attempts of the same task (sink/fence_decision) |
| announce (a pipeline's control log, claims_layout) | claims_records, claims_log | a write task attempt that is not the first of its task under its plan, before its claim | the first attempt of the task (sink/fence_decision.needs_claims_read) |
| commit metadata (generation, batch, query; a progress record's plan and run) with each committed offset | commit_metadata, sink/task_progress | each write task, with the offsets of its transaction | later write tasks' commit decision (sink), the operator's status |
| a source's offsets in the checkpoint (offsets/<batch>) | checkpoint_offsets | the driver's source, per planned batch (Spark writes it) | the source re-planning a batch; adopt-checkpoint (operator) |
| read-to-write hand-over file | handover | the task's read(), on the executor's local disk | the same task's write() |
| which executor, which local directory | executor_identity | — | the hand-over and the sink's transactional ids |

What is kept in Kafka or in the checkpoint (the claims topic's records, commit metadata, the
checkpoint's offsets) is read by later runs, perhaps of a later version of eos-kafka: each carries
its format (formats).

Arrows run one way: ``kafka`` ← ``protocol`` ← {``source``, ``sink``} ← the data source and
the operator tools. This package imports only ``kafka``, ``errors`` and ``version``.
"""
