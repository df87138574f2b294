"""emqsim.pools: signals held while the main thread is inside an executor, delivered right after; pool
workers that start with them blocked and then ignore Ctrl-C. (The commands' real signals: test_interrupts.)"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from emqsim.pools import HELD, SignalsHeld, gather, owned_pool, result_of, submit_all, wait_some


@pytest.fixture(autouse=True)
def main_thread_handlers() -> Iterator[list[int]]:
    """Handlers that record what reached them, restored afterwards; main thread only (signals go there)."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be set from the main thread")
    got: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: got.append(signum)) for s in HELD}
    try:
        yield got
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def blocked() -> set[int]:
    return set(signal.pthread_sigmask(signal.SIG_BLOCK, []))


def test_a_signal_raised_inside_reaches_the_previous_handler_on_leaving(main_thread_handlers) -> None:
    got = main_thread_handlers
    handlers = {s: signal.getsignal(s) for s in HELD}
    with SignalsHeld():
        signal.raise_signal(signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)
        assert got == []
        assert set(HELD) <= blocked()
    assert sorted(got) == [signal.SIGINT, signal.SIGTERM]  # each once (two pending signals have no order)
    assert {s: signal.getsignal(s) for s in HELD} == handlers
    assert not set(HELD) & blocked()


def test_nested_sections_deliver_once_when_the_outer_one_ends(main_thread_handlers) -> None:
    got = main_thread_handlers
    with SignalsHeld():
        with SignalsHeld():
            signal.raise_signal(signal.SIGINT)
        assert got == [] and set(HELD) <= blocked()
    assert got == [signal.SIGINT]


def test_a_signal_another_thread_receives_is_held_too(main_thread_handlers) -> None:
    """A process-directed signal goes to a thread that does not block it; Python still runs the handler in the
    main thread, at its next chance: that must be the noting one while held."""
    got = main_thread_handlers
    go, sent = threading.Event(), threading.Event()

    def sender() -> None:  # started before the section, so it does not block the signals
        go.wait(5)
        os.kill(os.getpid(), signal.SIGINT)
        sent.set()

    thread = threading.Thread(target=sender)
    thread.start()
    with SignalsHeld():
        go.set()
        assert sent.wait(5)
        for _ in range(100):  # give the handler every chance to run in here
            time.sleep(0.001)
        assert got == []
    thread.join()
    assert got == [signal.SIGINT]


def test_a_keyboard_interrupt_comes_after_the_section_not_inside_it() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    reached_the_end = False
    with pytest.raises(KeyboardInterrupt), SignalsHeld():
        signal.raise_signal(signal.SIGINT)
        time.sleep(0.01)
        reached_the_end = True
    assert reached_the_end
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _worker_signals(_: object) -> tuple[set[int], object, object]:
    return blocked(), signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)


def test_pool_workers_start_with_nothing_blocked_ignore_ctrl_c_and_end_on_sigterm() -> None:
    with owned_pool(2) as pool:
        results = gather(submit_all(pool, _worker_signals, range(4)))
    for mask, on_int, on_term in results:
        assert not set(HELD) & mask
        assert (on_int, on_term) == (signal.SIG_IGN, signal.SIG_DFL)
    assert not set(HELD) & blocked()


def test_wait_some_returns_within_its_poll_and_results_come_in_order() -> None:
    with owned_pool(2) as pool:
        futures = submit_all(pool, abs, [-3, -1, -2])
        pending = set(futures)
        while pending:
            done, pending = wait_some(pending, timeout=0.05)
        assert [result_of(f) for f in futures] == [3, 1, 2]
        assert gather(futures) == [3, 1, 2]


def test_without_signal_masks_signals_are_still_noted_and_delivered(
    main_thread_handlers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows has no signal masks: the noting handlers alone hold a signal."""
    import emqsim.pools as pools

    got = main_thread_handlers
    monkeypatch.setattr(pools, "CAN_BLOCK", False)
    with SignalsHeld():
        assert not set(HELD) & blocked()
        signal.raise_signal(signal.SIGINT)
        assert got == []
    assert got == [signal.SIGINT]


def test_batches_keep_the_order_and_make_at_most_the_parts_asked_for() -> None:
    from emqsim.pools import batches

    items = list(range(10))
    assert batches(items, 3) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches(items, 64) == [[i] for i in items]
    assert batches([], 4) == []
    for parts in range(1, 12):
        cut = batches(items, parts)
        assert len(cut) <= parts and [i for b in cut for i in b] == items
