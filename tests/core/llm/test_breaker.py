"""The run's circuit breaker (`legival_core.llm.breaker`): probing lets `open_after` calls through,
connection failures open it, any answer closes it for the run. Its use by a judge against a closed
port is in `tests/core/judges/test_judge_unreachable.py`."""

from __future__ import annotations

import threading
import time

from legival_core.llm.breaker import Breaker


def test_the_breaker_probes_then_opens_or_closes() -> None:
    b = Breaker(open_after=2)
    assert b.enter() and b.enter()
    entered = threading.Event()
    third = threading.Thread(target=lambda: b.enter() and entered.set())
    third.start()
    time.sleep(0.05)
    assert not entered.is_set()  # probing: two traces in flight, the third waits
    b.unreachable("cannot connect")
    b.leave()
    time.sleep(0.05)
    assert not entered.is_set()  # a connection failure does not free its probe slot
    b.unreachable("cannot connect")
    b.leave()
    third.join(1)
    assert b.is_open and not entered.is_set() and b.not_sent == 1 and b.reason == "cannot connect"

    c = Breaker(open_after=2)
    assert c.enter()
    c.answered()  # the server answered once: full concurrency, never opens in this run
    assert all(c.enter() for _ in range(10))
    for _ in range(5):
        c.unreachable("cannot connect")
    assert not c.is_open and c.not_sent == 0
