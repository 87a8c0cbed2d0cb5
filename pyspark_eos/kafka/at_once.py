"""Independent requests to the cluster sent at once rather than one after another.

A query's first micro-batch waits for the driver's checks before any task starts (the sink's
output, its transactions and its claims topic): each is a client's first contact and a request or
two, so their round trips add up on every query's start. Run at once, they cost the longest.
"""
from __future__ import annotations

import threading
from typing import Callable, Sequence


def all_at_once(calls: Sequence[Callable[[], object]]) -> list:
    """Each call's result, in order, once all of them have returned; the first call's in this
    thread. A failure is raised once every call has ended (none is left running behind the
    caller's back), and the first one in the order of ``calls`` wins: the checks are ordered so
    that the most basic failure (no broker answering) is the one explained."""
    outcomes: list[tuple[bool, object] | None] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            outcomes[index] = (True, calls[index]())
        except BaseException as error:  # noqa: BLE001 - raised in the caller's thread
            outcomes[index] = (False, error)

    threads = [threading.Thread(target=run, args=(index,), name="eos-kafka check", daemon=True)
               for index in range(1, len(calls))]
    for thread in threads:
        thread.start()
    if calls:
        run(0)
    for thread in threads:
        thread.join()
    for succeeded, value in outcomes:
        if not succeeded:
            raise value
    return [value for _, value in outcomes]
