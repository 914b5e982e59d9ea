"""Spread requests over several servers: least outstanding requests, bounded per server.

A server that just failed at the connection level is rested for a while, so its share
goes to the others instead of burning retries; when every server is resting, requests
still go out (to the one whose rest ends first) rather than stalling the run.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field


@dataclass
class Endpoint:
    url: str
    limit: int
    outstanding: int = 0
    requests: int = 0
    failures: int = 0
    rest_until: float = 0.0
    consecutive_failures: int = field(default=0, repr=False)


class EndpointPool:
    def __init__(self, urls: list[str], max_in_flight: int, rest_s: float = 5.0):
        self.endpoints = [Endpoint(u.rstrip("/"), max_in_flight) for u in urls]
        self.rest_s = rest_s
        self._cond = asyncio.Condition()

    @property
    def capacity(self) -> int:
        return sum(e.limit for e in self.endpoints)

    @property
    def in_flight(self) -> int:
        return sum(e.outstanding for e in self.endpoints)

    def _pick(self) -> Endpoint | None:
        free = [e for e in self.endpoints if e.outstanding < e.limit]
        if not free:
            return None
        now = time.monotonic()
        awake = [e for e in free if e.rest_until <= now] or sorted(free, key=lambda e: e.rest_until)[:1]
        return min(awake, key=lambda e: e.outstanding)

    async def acquire(self) -> Endpoint:
        async with self._cond:
            while (ep := self._pick()) is None:
                await self._cond.wait()
            ep.outstanding += 1
            ep.requests += 1
            return ep

    async def release(self, ep: Endpoint, ok: bool, connection_failed: bool = False) -> None:
        async with self._cond:
            ep.outstanding -= 1
            if ok:
                ep.consecutive_failures = 0
            else:
                ep.failures += 1
            if connection_failed:
                ep.consecutive_failures += 1
                # Rest longer the more often it failed in a row, capped at a minute.
                ep.rest_until = time.monotonic() + min(self.rest_s * ep.consecutive_failures, 60.0)
            self._cond.notify()

    def summary(self) -> dict[str, dict[str, int]]:
        return {e.url: {"requests": e.requests, "failures": e.failures} for e in self.endpoints}
