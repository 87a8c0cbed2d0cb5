"""The operator's view (``python -m pyspark_eos``): a running pipeline's offsets, open transactions,
members and transactional ids (``status``), aborting what dead workers left open
(``abort-lingering``), and a stopped query's checkpoint position committed as a consumer group's
offsets, for a switch to eos-kafka (``adopt-checkpoint``). Reads ``__transaction_state`` and
``__consumer_offsets`` directly (``coordinator_records``), since librdkafka's admin API cannot
describe transactions."""
