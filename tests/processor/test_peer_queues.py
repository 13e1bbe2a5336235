"""Which replicas the other workers' queues wait for (``processor/peer_queues.py``): what each worker said last,
every worker's together, for as long as it keeps saying it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from inferplane.processor.peer_queues import STALE_SECONDS, PeerQueues
from tests.gateway_support import HandClock


def test_every_workers_wants_together_each_as_it_said_last() -> None:
    peers = PeerQueues(HandClock())
    assert peers.wanted("m") == frozenset()
    peers.heard("m", "w1", frozenset({"a", "b"}))
    peers.heard("m", "w2", frozenset({"c"}))
    peers.heard("other", "w3", frozenset({"d"}))  # another model's queue
    assert peers.wanted("m") == {"a", "b", "c"}
    peers.heard("m", "w1", frozenset({"b"}))  # w1's requests preferring a left its queue
    assert peers.wanted("m") == {"b", "c"}
    peers.heard("m", "w2", frozenset())
    assert peers.wanted("m") == {"b"} and peers.wanted("other") == {"d"}


def test_what_a_worker_said_counts_until_it_goes_stale() -> None:
    clock = HandClock()
    peers = PeerQueues(clock)
    peers.heard("m", "w1", frozenset({"a"}))
    clock.now += STALE_SECONDS / 2
    peers.heard("m", "w2", frozenset({"b"}))
    clock.now += STALE_SECONDS / 2
    assert peers.wanted("m") == {"a", "b"}
    clock.now += 0.01  # w1 sent no keepalive: gone
    assert peers.wanted("m") == {"b"}
    peers.heard("m", "w1", frozenset({"a"}))  # back
    assert peers.wanted("m") == {"a", "b"}


@given(
    st.lists(
        st.tuples(st.sampled_from(["w1", "w2", "w3"]), st.frozensets(st.sampled_from("abcd")), st.floats(0, 3)),
        max_size=12,
    )
)
def test_the_wanted_replicas_are_the_union_of_what_each_live_worker_said_last(
    said: list[tuple[str, frozenset[str], float]],
) -> None:
    """Any sequence of messages, each after a pause: the union over the workers heard within STALE_SECONDS of what
    each said last."""
    clock = HandClock()
    peers = PeerQueues(clock)
    last: dict[str, tuple[float, frozenset[str]]] = {}
    for worker, wants, pause in said:
        clock.now += pause
        peers.heard("m", worker, wants)
        last[worker] = (clock.now, wants)
        live = [w for at, w in last.values() if clock.now - at <= STALE_SECONDS]
        assert peers.wanted("m") == frozenset().union(*live)
