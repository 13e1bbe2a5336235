"""The gateway pods' picks, passed between them over Redis pub/sub: every pod's prefix index learns every pod's picks
(and every pod's workers hear of the slots the others give back to the store and which replicas their queues wait
for, :mod:`.watch`).

Within a pod the workers pass their picks to each other over the watcher's socket (:mod:`.watch`). Across pods
each pod's watcher publishes its workers' picks on one channel of the gateway's Redis (the budgets' and the slots'
store, ``<redis_key_prefix>picks.3``) and hands the other pods' picks to its workers, whose indexes record them as
their own. Learning apart, three pods in front of the simulated fleet (8 replicas of prod's 70B, 20 shared
6,144-token prefixes, ``docs/simulate.md``) each homed every prefix themselves (60-61 homes for 20 prefixes a run),
and the engines served 79.3-84.1% of prompt tokens from cache against an ideal 92.1%; through the channel, 92.1% in
both runs, with 20 homes.

What it costs: one PUBLISH a pick, from the watcher's thread, not the request's path (a worker writes its pick to the
socket and goes on); each worker then reads and records every pick of the gateway, about 0.08 ms for a 6,400-token
prompt, so a worker's share grows with the whole gateway's request rate, as a replicated index's does (Dynamo's KV
routers each consume every worker's KV events). A message is the pod's token, a space and the worker's line. Nothing
rests on it: when Redis does not answer, each pod learns from its own workers, and the subscriber reconnects.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from inferplane.processor.redis_connection import connect_redis

log = logging.getLogger(__name__)

CHANNEL_SUFFIX = "picks.3"
"""The channel, after the gateway's ``redis_key_prefix``: one per gateway, whose pods route to the same replicas. The
number is the lines' format (3: picks, slots given back and queues' wants, ``{"model": M, "freed": address}`` and
``{"model": M, "from": worker, "wants": [...]}``, :mod:`.watch`; 2: picks alone, whose workers would read either new
line as a round's beginning; 1: the hashes as a JSON list): during a rolling update the pods of two releases
publish on two channels and learn apart, as when Redis does not answer, instead of reading lines they cannot."""
RECONNECT_SECONDS = 1.0
"""How long the subscriber waits before it subscribes again after Redis went away."""
HEALTH_CHECK_SECONDS = 30
"""How often an idle subscription checks its connection (a silent channel would otherwise hide a dead one)."""


class PickBus:
    """One pod's end of the channel: :meth:`publish` its workers' picks, :meth:`run` to hand the others' to
    ``deliver``."""

    def __init__(self, url: str, channel: str, deliver: Callable[[bytes], None], timeout: float, **tls: Any) -> None:
        # Two clients: the publisher is the budgets' kind, every round trip bounded by ``timeout``; the subscriber's
        # read waits for the next message as long as the channel is quiet, so it has no socket timeout, only the
        # health check.
        self._publisher = connect_redis(url, timeout, **tls)
        self._subscriber = Redis.from_url(
            url, socket_connect_timeout=timeout, health_check_interval=HEALTH_CHECK_SECONDS, **tls
        )
        self.channel = channel
        self._deliver = deliver
        self._token = secrets.token_hex(8).encode()
        self._failing = False
        self._deaf = False
        self.subscribed = asyncio.Event()

    async def publish(self, line: bytes) -> None:
        """Send one worker's line to the other pods (a failure is logged once until Redis answers again)."""
        try:
            await self._publisher.publish(self.channel, self._token + b" " + line)
        except (RedisError, OSError, TimeoutError) as error:
            if not self._failing:
                log.error("the other gateway pods cannot be told of this pod's picks (%s)", error)
            self._failing = True
            return
        self._failing = False

    async def run(self) -> None:
        """Hand every other pod's line to ``deliver``, subscribing again whenever Redis goes away (until cancelled;
        an outage is logged once, and its end)."""
        while True:
            pubsub = self._subscriber.pubsub()
            try:
                await pubsub.subscribe(self.channel)
                self.subscribed.set()
                if self._deaf:
                    log.warning("the other gateway pods' picks are heard again")
                    self._deaf = False
                async for message in pubsub.listen():
                    if message.get("type") != "message":
                        continue
                    token, _, line = bytes(message["data"]).partition(b" ")
                    if token != self._token and line.endswith(b"\n"):
                        self._deliver(line)
            except (RedisError, OSError, TimeoutError) as error:
                if not self._deaf:
                    log.error("the other gateway pods' picks are not heard (%s): subscribing again each second", error)
                self._deaf = True
            finally:
                self.subscribed.clear()
                await pubsub.aclose()
            await asyncio.sleep(RECONNECT_SECONDS)

    async def aclose(self) -> None:
        """Close both clients."""
        await self._publisher.aclose()
        await self._subscriber.aclose()
