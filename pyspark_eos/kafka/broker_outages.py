"""Whether a kept client lived through the loss of all its brokers: such a client is not reused.

After a lone broker's restart (even a clean one), a producer that lived through it hung in
send_offsets_to_transaction until the call's deadline, and an AdminClient's requests to the
group's coordinator went unanswered, while clients made after the restart were answered at once.
"""
from __future__ import annotations

import logging

from confluent_kafka import KafkaError

log = logging.getLogger(__name__)


class BrokerOutages:
    """A client's error_cb: whether librdkafka has reported all its brokers down since it was made."""

    def __init__(self):
        self.seen = False

    def __call__(self, error: KafkaError) -> None:
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            self.seen = True


def lost_all_brokers(serve, outages: BrokerOutages | None, what: str) -> bool:
    """``serve()`` runs the client's pending callbacks (librdkafka reports errors to error_cb only
    inside poll(), consume() or flush())."""
    serve()
    lost = outages is not None and outages.seen
    if lost:
        log.warning("%s lost all its brokers since it was made; replacing it", what)
    return lost
