"""An approximate index of which replica holds which prompt prefix in its KV cache, built from the router's own picks.

The engines cache prompt prefixes in fixed blocks of tokens (vLLM's automatic prefix caching, TensorRT-LLM's KV
reuse) and reuse a block only when every block before it matches too. The index mirrors that: a prompt is cut into
blocks of the engine's block size and each block's hash chains the previous one (as vLLM's ``hash_block_tokens`` and
the Gateway API Inference Extension's approximate prefix producer do), so block ``i`` matching implies blocks
``0..i-1`` match. After each pick the picked replica is recorded as holding the request's blocks; each replica keeps
at most its KV pool's worth of blocks, least recently used first out, as the engine evicts. Nothing asks the engine
what it holds: the estimate and the engines' real hit rate are both exported, and an alert watches them drift apart.

Block hashes are Python's hash of tuples of ints, which (unlike ``str`` hashes) is the same in every process, so every
gateway replica and worker computes the same block hashes; a rendezvous weight mixes a block hash with the replica's
address through a fixed function (:func:`rendezvous`), so they agree on the homes too.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import math
import sys
import time
import zlib
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence

MESSAGE_SEPARATOR = -1
"""Put between two chat messages' token ids, so moving text from one message to the next changes the hash."""
BYTES_PER_ESTIMATED_TOKEN = 4
"""Without a tokenizer, a block is ``block_tokens`` x this many bytes of UTF-8 (GIE's 4 characters per token)."""
HOME_PREFIX_TOKENS = 256
"""An unseen prefix's home is chosen from the hash of its first 256 tokens or so (smg's ``prefix_hash`` policy hashes
the first 256 tokens): long enough to tell conversations apart, short enough that a shared preamble decides it."""


FRESH_SECONDS = 10.0
"""How long a block just computed counts as kept before it is used again (see :meth:`PrefixIndex.claimed`)."""


def model_seed(model: str) -> int:
    """The first link of every chain for ``model`` (a stable number, unlike ``hash(str)``)."""
    return zlib.crc32(model.encode())


def token_blocks(token_ids: Sequence[int], block_tokens: int, max_blocks: int, seed: int) -> list[int]:
    """Chained hashes of the full blocks of ``token_ids`` (a partial last block is not cached by the engines)."""
    hashes: list[int] = []
    previous = seed
    for start in range(0, min(len(token_ids) // block_tokens, max_blocks) * block_tokens, block_tokens):
        previous = hash((previous, *token_ids[start : start + block_tokens]))
        hashes.append(previous)
    return hashes


def byte_blocks(texts: Iterable[str], block_tokens: int, max_blocks: int, seed: int) -> list[int]:
    """Chained hashes of a prompt's text when the model has no tokenizer: blocks of estimated tokens."""
    data = b"\x00".join(text.encode() for text in texts)
    size = block_tokens * BYTES_PER_ESTIMATED_TOKEN
    hashes: list[int] = []
    previous = seed
    for start in range(0, min(len(data) // size, max_blocks) * size, size):
        # Not hash(bytes): that is salted per process (PYTHONHASHSEED); a digest keeps every processor in step.
        digest = int.from_bytes(hashlib.blake2b(data[start : start + size], digest_size=8).digest())
        previous = hash((previous, digest))
        hashes.append(previous)
    return hashes


def home_block(hashes: Sequence[int], block_tokens: int) -> int:
    """The hash that names a prefix's home: the block ending near :data:`HOME_PREFIX_TOKENS` (or the last one)."""
    return hashes[min(len(hashes), max(1, HOME_PREFIX_TOKENS // block_tokens)) - 1]


def pack_hashes(hashes: Sequence[int]) -> str:
    """Block hashes as text for a line between processes: each as 8 bytes, little-endian, in base64 (Python's hash
    of a tuple is a signed 64-bit number). A 6,400-token prompt's 400 hashes take 4,268 characters against about
    8,560 as a JSON list, and its pick's line costs 33 microseconds to write and 26 to read against 44 and 67 with
    the list (``timeit``, this 2-core machine, 2026-12-07): every other worker of the gateway reads every pick."""
    packed = array("q", hashes)
    if sys.byteorder == "big":  # every pod's image runs little-endian today; the text is the same either way
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def unpack_hashes(text: str) -> list[int]:
    """The block hashes :func:`pack_hashes` wrote; ValueError for anything else."""
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError as error:  # binascii.Error for a bad character or length, ValueError itself for non-ASCII text
        raise ValueError(f"not packed block hashes: {error}") from error
    if len(raw) % 8:
        raise ValueError(f"not packed block hashes: {len(raw)} bytes is not a whole number of 8-byte hashes")
    hashes = array("q", raw)
    if sys.byteorder == "big":
        hashes.byteswap()
    return hashes.tolist()


MASK64 = (1 << 64) - 1


def mix64(x: int) -> int:
    """SplitMix64's output function (Vigna, https://prng.di.unimi.it/splitmix64.c, public domain): a bijection of
    64-bit numbers in which every input bit flips each output bit about half the time."""
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


@functools.lru_cache(maxsize=4096)
def endpoint_key(endpoint: str) -> int:
    """A stable number for an ``ip:port`` (rendezvous weights must agree across processes)."""
    return mix64(zlib.crc32(endpoint.encode()))


def rendezvous(block: int, endpoint: str) -> int:
    """Highest-random-weight hashing: every process ranks the replicas for ``block`` the same way, and a replica
    coming or going moves only the prefixes whose top choice it is.

    The weight is mixed by :func:`mix64`, not Python's tuple hash, which this used until a test's two replicas homed
    all 16 of its prompts on one: ``hash((block, key))`` orders two replicas alike for most blocks, so over random
    blocks one replica of a pair was home to more than 60% of them for 57% of pairs (2,000 pairs of random ports; one
    pair 96%), and among 8 replicas the busiest was home to 1.73 times its share at the median (2.42 among 32; the
    least 0.41 and 0.19), 100 random sets of pod addresses, 2,000 random blocks each. Mixed: 47.3-52.7% for 98% of
    pairs (2,000 blocks give a binomial spread of 1.1%), 1.09 and 1.25 times the share, as chance has it."""
    return mix64((block & MASK64) ^ endpoint_key(endpoint))


class PrefixIndex:
    """Per replica, the block hashes it is estimated to hold (an LRU bounded by the replica's KV pool in blocks), and
    how many of them were used again after they were first computed (the *reused* blocks: shared prefixes and
    conversations, which the replica's cache keeps serving, not one-off prompts)."""

    def __init__(self, capacity_blocks: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity_blocks = capacity_blocks
        self._held: dict[str, OrderedDict[int, bool]] = {}
        self._reused: dict[str, int] = {}
        self._fresh: dict[str, OrderedDict[int, float]] = {}
        self._clock = clock

    def overlap(self, endpoint: str, hashes: Sequence[int]) -> int:
        """Leading blocks of ``hashes`` the replica is estimated to hold."""
        held = self._held.get(endpoint)
        if not held:
            return 0
        matched = 0
        for block in hashes:
            if block not in held:
                break
            matched += 1
        return matched

    def record(self, endpoint: str, hashes: Sequence[int]) -> None:
        """The replica now holds ``hashes`` (it prefilled them, or reused them): most recently used, the first block
        most of all. vLLM frees a finished request's blocks tail first, "so that the tail blocks are evicted first"
        (``vllm/v1/core/single_type_kv_cache_manager.py``, 0.32), so under pressure a prompt loses its last blocks and
        keeps its prefix; recorded head last, the index evicts as the engine does. Recorded head first, it would drop
        a prefix's first block before its others, and every block after it would stay counted without ever matching
        (:meth:`overlap` needs the leading blocks)."""
        if not hashes:
            return
        held = self._held.setdefault(endpoint, OrderedDict())
        fresh = self._fresh.setdefault(endpoint, OrderedDict())
        reused = self._reused.get(endpoint, 0)
        now = self._clock()
        for block in reversed(hashes):
            seen = held.get(block)
            if seen is None:
                held[block] = False
                fresh[block] = now
            else:
                if not seen:
                    held[block] = True
                    reused += 1
                    fresh.pop(block, None)
                held.move_to_end(block)
        while len(held) > self.capacity_blocks:
            block, was_reused = held.popitem(last=False)
            reused -= was_reused
            fresh.pop(block, None)
        self._reused[endpoint] = reused

    def forget(self, endpoint: str) -> None:
        """The replica is gone (or restarted): it holds nothing of what was recorded."""
        self._held.pop(endpoint, None)
        self._reused.pop(endpoint, None)
        self._fresh.pop(endpoint, None)

    def reused(self, endpoint: str) -> int:
        """Blocks the replica holds that were used again after they were computed."""
        return self._reused.get(endpoint, 0)

    def claimed(self, endpoint: str) -> int:
        """Blocks the replica's cache is counted on to keep: the reused ones, and those computed in the last
        :data:`FRESH_SECONDS` and not used again yet, whose reuse cannot have shown (a shared prefix's first
        request is not yet known to be shared, and a burst of new prefixes would all find room on one replica)."""
        fresh = self._fresh.get(endpoint)
        if fresh:
            horizon = self._clock() - FRESH_SECONDS
            while fresh and next(iter(fresh.values())) < horizon:
                fresh.popitem(last=False)
        return self._reused.get(endpoint, 0) + (len(fresh) if fresh else 0)

    def endpoints(self) -> tuple[str, ...]:
        """Replicas with recorded blocks."""
        return tuple(self._held)

    def size(self, endpoint: str) -> int:
        """Blocks recorded for the replica."""
        return len(self._held.get(endpoint, ()))


def blocks_for(tokens: int, block_tokens: int) -> int:
    """Blocks a sequence of ``tokens`` occupies."""
    return math.ceil(tokens / block_tokens)
