"""The operator's view (``python -m pyspark_eos``): a running pipeline's offsets, open transactions,
members and transactional ids (``status``), and aborting what dead workers left open
(``abort-lingering``). Reads ``__transaction_state`` and ``__consumer_offsets`` directly
(``coordinator_records``), since librdkafka's admin API cannot describe transactions."""
