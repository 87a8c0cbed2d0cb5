"""A librdkafka call bounded by a deadline of our own, for calls that may never return.

librdkafka's ``send_offsets_to_transaction`` does not honour its timeout while it looks for the
group's coordinator (librdkafka issues #5456 and #5511, open in 2.16): when the coordinator's
broker stopped, the call can block for good, and with it the write task, its batch and the query.
The call runs in a thread; past the deadline the caller gets ``DeadlineExceeded`` and must treat
the client as lost (it is still inside the call and can do nothing else): a transactional producer
is dropped, and the next attempt of its task fences its transactional id, which aborts whatever
it had open. Where the caller can tell that the call will not end by itself (the group's coordinator
moved to another broker while the producer still waits for the old one, or answers while the call
still waits for a request lost with its connection), it gives it up then.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, TypeVar

from ..errors import KafkaClientError

T = TypeVar("T")


class DeadlineExceeded(KafkaClientError):
    """A librdkafka call did not return in time; the client that made it is lost."""


# When a call may be given up before its deadline (``give_up``): first asked after this long (a
# call that ends normally takes milliseconds), then at this interval.
FIRST_CHECK_S = 3.0
CHECK_EVERY_S = 2.0


def call_with_deadline(call: Callable[[], T], timeout_s: float, what: str,
                       give_up: Callable[[float], str | None] | None = None) -> T:
    """``call``'s result, or ``DeadlineExceeded`` after ``timeout_s``; or earlier, once ``give_up``
    (asked while the call runs, with the seconds it has waited) names why the call will not end by
    itself."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = error

    thread = threading.Thread(target=run, name=f"eos-kafka {what}", daemon=True)
    started = time.monotonic()
    thread.start()
    reason = _joined(thread, started + timeout_s, give_up)
    if thread.is_alive():
        why = reason or "librdkafka can wait for good for a group coordinator whose broker stopped"
        raise DeadlineExceeded(
            f"{what} did not return in {time.monotonic() - started:.0f} s ({why}); the client is given up and the "
            "task fails, so that its retry starts over with a new one")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _joined(thread: threading.Thread, deadline: float, give_up: Callable[[float], str | None] | None) -> str | None:
    """Waits for ``thread`` until ``deadline``; the reason ``give_up`` gave, if it gave one first."""
    started = time.monotonic()
    check_at = started + FIRST_CHECK_S if give_up is not None else deadline
    while thread.is_alive():
        now = time.monotonic()
        if now >= deadline:
            return None
        if now >= check_at:
            reason = give_up(now - started)
            if reason and thread.is_alive():
                return reason
            check_at = time.monotonic() + CHECK_EVERY_S
        thread.join(max(0.0, min(deadline, check_at) - time.monotonic()))
    return None
