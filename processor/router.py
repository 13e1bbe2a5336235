"""Which replica of a model each request should go to: prefix overlap against load, with one cost function.

For every ready replica ``r`` (NVIDIA Dynamo's KV router cost, ``docs/design_docs/router_design.md``)::

    cost(r) = overlap_weight x prefill_blocks(r) + decode_blocks(r)

* ``prefill_blocks(r)``: the prompt's blocks that ``r`` would have to compute, i.e. all of them less the leading blocks
  the prefix index estimates ``r`` holds;
* ``decode_blocks(r)``: the KV blocks of the sequences ``r`` is running: those this processor put there (their prompt
  blocks, known exactly) plus, for the sequences the engine reports beyond them (other gateway replicas' requests),
  the mean blocks of a request here. A request's own blocks are those it adds: its prompt's blocks the replica
  did not hold, plus one for its output. Blocks of a shared prefix are held once, as the engine shares them
  (counting them per request made a replica holding a hot prefix look busier than an idle one, and requests spilled).

Replicas are ranked by cost, cheapest first; the slot store then takes the first with a free slot (the load bound:
a replica running its ``max_num_seqs`` is skipped). A prefix no replica holds goes to its *home*, the replica ranked
first for it by rendezvous hashing, when the home costs at most one prompt's prefill more than the cheapest: every
gateway replica computes the same home without talking to the others, so N gateways do not scatter a new prefix over
N replicas, and a busy home (costing more than one prompt's prefill above the cheapest) is passed over. The
tolerance was one request's blocks (unweighted) until the simulated fleet showed what it cost: on 8 replicas behind
3 gateways (prod's 70B, shared prefixes at 8 req/s), 47 of 89 new-prefix picks passed their home over for a replica
a request or two less loaded, each gateway worker placing the prefix elsewhere, and the engines served 76% of prompt
tokens from cache against an ideal 91% (``docs/simulate.md``). A home's extra load is worth its prefill: every
later request of the prefix saves that much on whichever replica holds it, and the load bound still stops a full
home. Ties are
broken by the same rendezvous rank, or at random when there is no prefix to follow.

The home is the first replica in the prefix's rendezvous order with room for it: whose *claimed* blocks
(:meth:`~inferplane.processor.prefix_index.PrefixIndex.claimed`: those the index has seen used again while held,
shared prefixes and conversations, and those computed in the last few seconds whose reuse cannot have shown yet),
with this prompt's, stay within :data:`REUSED_SHARE` of its pool. Rendezvous alone spreads prefixes by chance, not
by size: on the simulated fleet (8 replicas of prod's 70B, each pool cut to 1,920 blocks, 20 shared 6,144-token
prefixes, 8 req/s) it homed 4-5 of the 20 on one replica, which they overfilled, so its engine evicted them and
computed them again: the engines served 84.5-87.1% of prompt tokens from cache against an ideal 92.1%. Room is
counted from the worker's index, which learns the pod's other workers' picks too (:mod:`~inferplane.processor.watch`;
learning apart, two workers homed one prefix on two replicas): 91.9-92.1% in three runs, TTFT p90 125-144 ms
(``docs/simulate.md``); and the gateway's other pods' picks (:mod:`~inferplane.processor.pick_bus`): 92.1% behind
three gateways, against 79.3-84.1% with each pod learning apart.

The tolerance stays one prompt's prefill even for traffic whose prefixes never come back. Scaling it by the share of
recent prompts' blocks found held (0 for unique prompts, so a new prompt would go to the cheapest replica) was tried
on the simulated fleet (8 replicas of prod's 70B, 2,048-token unique prompts; ``docs/simulate.md``): it spread the
requests as least-request does (busiest/idlest 1.17 against 1.64) and raised TTFT p90 from 569 to 924 ms at 14
req/s, least-request's. A home is a different replica for each prompt, a spread by hash within one prefill of the
cheapest; why that beats the cheapest on TTFT is not established (reading the replicas' load five times as often
did not change least-request's TTFT), so the measured better one stays.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from inferplane.processor.endpoints import Endpoint
from inferplane.processor.metrics import RoutingReason
from inferplane.processor.prefix_index import PrefixIndex, blocks_for, home_block, rendezvous

MEAN_BLOCKS_DECAY = 0.05
"""Weight of each new request in the running mean of prompt blocks (about the last 20 requests)."""
REUSED_SHARE = 0.75
"""Most of a replica's KV pool the prefixes it keeps reusing may fill before a new prefix whose home it is goes to
the next replica in that prefix's rendezvous order (the rest is for the running sequences' own blocks)."""


@dataclass(frozen=True)
class Ranking:
    """The replicas in order of preference, what each is estimated to hold, and why the first is first."""

    ranked: tuple[Endpoint, ...]
    overlaps: dict[str, int]
    reason: RoutingReason

    def preferred(self) -> frozenset[str]:
        """The replicas a queued request waits for: those holding the most of its prompt, or its new prefix's home;
        none when nothing makes one better than another (no prefix, or a home passed over for load)."""
        best = max(self.overlaps.values(), default=0)
        if best > 0:
            return frozenset(address for address, overlap in self.overlaps.items() if overlap == best)
        if self.reason == "prefix_home":
            return frozenset((self.ranked[0].address,))
        return frozenset()

    def reason_for(self, picked: str) -> RoutingReason:
        """Why ``picked`` serves the request: the first choice's reason, or a spill when a fuller one was passed."""
        if self.ranked and picked == self.ranked[0].address:
            return self.reason
        best = max(self.overlaps.values(), default=0)
        if best == 0:
            return "least_load"
        return "prefix_hit" if self.overlaps.get(picked, 0) == best else "load_spill"


class Router:
    """Ranks one model's replicas for a request (pure: the caller passes the ready replicas)."""

    def __init__(self, block_tokens: int, overlap_weight: float, prefix_aware: bool, index: PrefixIndex) -> None:
        self.block_tokens = block_tokens
        self.overlap_weight = overlap_weight
        self.prefix_aware = prefix_aware
        self.index = index
        self.mean_blocks = 1.0

    def decode_blocks(self, endpoint: Endpoint) -> float:
        """The KV blocks the replica is estimated to hold for the sequences it runs, every gateway's: this
        processor's requests' own blocks plus the mean for each other sequence the engine reports. Other sequences
        are the engine's count less this processor's requests *when the engine counted* (less its requests now, a
        request that ended since the last scrape would count as another gateway's, a phantom that sent the next
        request sharing a prefix elsewhere). The engine's KV usage is not used: it is a scrape old and counts in the
        engine's pool, which a local run may size apart."""
        others = max(0.0, endpoint.engine_active - endpoint.inflight_at_scrape)
        return endpoint.inflight_blocks + others * self.mean_blocks

    def rank(self, ready: Sequence[Endpoint], hashes: Sequence[int], prompt_tokens: int) -> Ranking:
        """The ready replicas, cheapest first (see the module docstring)."""
        prompt_blocks = blocks_for(max(prompt_tokens, 1), self.block_tokens)
        use_prefix = self.prefix_aware and bool(hashes)
        overlaps = {e.address: self.index.overlap(e.address, hashes) for e in ready} if use_prefix else {}
        home = home_block(hashes, self.block_tokens) if hashes else prompt_tokens
        costs = {
            e.address: self.overlap_weight * (prompt_blocks - overlaps.get(e.address, 0)) + self.decode_blocks(e)
            for e in ready
        }
        # Each replica's rendezvous weight for the prefix, once: it breaks ties here and orders the homes below.
        weights = {e.address: rendezvous(home, e.address) for e in ready} if use_prefix else {}
        tie = (lambda e: -weights[e.address]) if use_prefix else (lambda _: random.random())
        ranked = sorted(ready, key=lambda e: (costs[e.address], tie(e)))
        if not ranked or not use_prefix:
            return Ranking(tuple(ranked), overlaps, "least_load")
        best_overlap = max(overlaps.values())
        if best_overlap > 0:
            first = overlaps[ranked[0].address]
            return Ranking(tuple(ranked), overlaps, "prefix_hit" if first == best_overlap else "load_spill")
        home_endpoint = self.home(ranked, weights, prompt_blocks)
        if costs[home_endpoint.address] <= costs[ranked[0].address] + self.overlap_weight * prompt_blocks:
            ranked.remove(home_endpoint)
            ranked.insert(0, home_endpoint)
            return Ranking(tuple(ranked), overlaps, "prefix_home")
        return Ranking(tuple(ranked), overlaps, "least_load")

    def home(self, ready: Sequence[Endpoint], weights: dict[str, int], prompt_blocks: int) -> Endpoint:
        """A new prefix's home: the first replica in the prefix's rendezvous order (``weights``, highest first) whose
        reused blocks, with this prompt's, stay within :data:`REUSED_SHARE` of its pool (the first in that order when
        none has room)."""
        order = sorted(ready, key=lambda e: weights[e.address], reverse=True)
        room = REUSED_SHARE * self.index.capacity_blocks - prompt_blocks
        return next((e for e in order if self.index.claimed(e.address) <= room), order[0])

    def picked(self, endpoint: Endpoint, hashes: Sequence[int], prompt_tokens: int, overlap: int = 0) -> int:
        """Note a request placed on ``endpoint``, which held ``overlap`` of its blocks: it adds the rest and one for
        its output; returns the blocks it adds."""
        blocks = max(1, blocks_for(max(prompt_tokens, 1), self.block_tokens) - overlap) + 1
        self.mean_blocks += MEAN_BLOCKS_DECAY * (blocks - self.mean_blocks)
        endpoint.inflight += 1
        endpoint.inflight_blocks += blocks
        if self.prefix_aware:
            self.index.record(endpoint.address, hashes)
        return blocks

    @staticmethod
    def finished(endpoint: Endpoint, blocks: int) -> None:
        """A request placed on ``endpoint`` has ended."""
        endpoint.inflight = max(0, endpoint.inflight - 1)
        endpoint.inflight_blocks = max(0, endpoint.inflight_blocks - blocks)
