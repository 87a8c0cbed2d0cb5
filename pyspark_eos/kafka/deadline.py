"""A librdkafka call bounded by a deadline of our own, for calls that may never return.

librdkafka's ``send_offsets_to_transaction`` does not honour its timeout while it looks for the
group's coordinator (librdkafka issues #5456 and #5511, open in 2.16): when the coordinator's
broker stopped, the call can block for good, and with it the write task, its batch and the query.
The call runs in a thread; past the deadline the caller gets ``DeadlineExceeded`` and must treat
the client as lost (it is still inside the call and can do nothing else): a transactional producer
is dropped, and the next attempt of its task fences its transactional id, which aborts whatever
it had open.
"""
from __future__ import annotations

import threading
from typing import Callable, TypeVar

from ..errors import KafkaClientError

T = TypeVar("T")


class DeadlineExceeded(KafkaClientError):
    """A librdkafka call did not return in time; the client that made it is lost."""


def call_with_deadline(call: Callable[[], T], timeout_s: float, what: str) -> T:
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = error

    thread = threading.Thread(target=run, name=f"eos-kafka {what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise DeadlineExceeded(
            f"{what} did not return in {timeout_s:.0f} s (librdkafka can wait for good for a group "
            "coordinator whose broker stopped); the client is given up and the task fails, so that its "
            "retry starts over with a new one")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]
