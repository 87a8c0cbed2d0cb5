"""Whether a kept client lived through the loss of all its brokers: such a client is not reused.

After a lone broker's restart (even a clean one), a producer that lived through it hung in
send_offsets_to_transaction until the call's deadline, and an AdminClient's requests to the
group's coordinator went unanswered, while clients made after the restart were answered at once.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

from confluent_kafka import KafkaError

from .held_clients import close_client

log = logging.getLogger(__name__)

C = TypeVar("C")


class BrokerOutages:
    """A client's error_cb: whether librdkafka has reported all its brokers down since it was made."""

    def __init__(self):
        self.seen = False

    def __call__(self, error: KafkaError) -> None:
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            self.seen = True


def lost_all_brokers(client, outages: BrokerOutages | None, what: str) -> bool:
    client.poll(0)  # librdkafka reports errors to error_cb only inside poll(), consume() or flush()
    lost = outages is not None and outages.seen
    if lost:
        log.warning("%s lost all its brokers since it was made; replacing it", what)
    return lost


@dataclass
class Watched(Generic[C]):
    """A kept client, with the error_cb that records its outages."""

    client: C
    outages: BrokerOutages

    def lost_all_brokers(self, what: str) -> bool:
        return lost_all_brokers(self.client, self.outages, what)

    def close(self) -> None:
        close_client(self.client)


def watched(make: Callable[[dict], C], config: dict) -> Watched[C]:
    """``make(config)`` with an error_cb that records its outages."""
    outages = BrokerOutages()
    return Watched(make({**config, "error_cb": outages}), outages)
