"""Connection slots of one client address at the edge (umbra/edge.py), and which address a
request counts against.

Each address holds at most `cap` connections. A connection is *unproven* until a request on it
authenticates (the service calls the `umbra.edge` scope extension's `authenticated()`); unproven
connections hold at most `unproven_cap` of the address's slots, and a newcomer over that share
displaces the oldest unproven one. At the whole cap a newcomer displaces, oldest first, an
unproven connection, then one still reading a request it began `grace` seconds ago or more, then
one idle between requests for `grace` seconds or more; a connection whose request is being served is never displaced. Only
when nothing can go is the newcomer refused (429).

Behind a reverse proxy every connection comes from the proxy's address: for a peer in the
explicit `trusted` allow-list the client is the right-most X-Forwarded-For entry that is not
itself trusted (the header of anyone else is ignored)."""

from __future__ import annotations

import ipaddress
import time
from collections import defaultdict
from typing import Iterable, Protocol


class Slot(Protocol):
    proven: bool
    opened: float  # time.monotonic() at connect
    def busy(self) -> bool: ...  # a request of it is being served (never displaced)
    def reading_since(self) -> float | None: ...  # monotonic start of an unfinished request, None if idle
    def idle_since(self) -> float: ...  # monotonic end of its last response (or its connect)
    def closing(self) -> bool: ...
    def displace(self) -> None: ...


class TrustedProxies:
    """An allow-list of proxy addresses and networks (`127.0.0.1`, `10.0.0.0/8`)."""

    def __init__(self, entries: Iterable[str] = ()):
        self.networks = tuple(ipaddress.ip_network(e.strip(), strict=False) for e in entries if e.strip())

    def __bool__(self) -> bool:
        return bool(self.networks)

    def __contains__(self, host: str) -> bool:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in net for net in self.networks)

    def client(self, peer: str, headers: list[tuple[bytes, bytes]]) -> str:
        """The address a request from `peer` counts against."""
        if peer not in self:
            return peer
        forwarded = b",".join(v for k, v in headers if k.lower() == b"x-forwarded-for").decode("latin-1")
        for hop in reversed([h.strip() for h in forwarded.split(",") if h.strip()]):
            if hop not in self:
                return hop
        return peer


class SlotTable:
    def __init__(self, cap: int, unproven_cap: int, grace: float = 1.0):
        self.cap, self.unproven_cap, self.grace = cap, max(1, min(unproven_cap, cap)), grace
        self.live: dict[str, list[Slot]] = defaultdict(list)
        self.displaced = 0  # connections closed to make room (a count for tests and benchmarks)

    def admit(self, address: str, slot: Slot) -> bool:
        """Take a slot for `slot` at `address`, displacing another if needed; False: refuse it."""
        mine = self.live[address]
        mine[:] = [s for s in mine if not s.closing()]
        unproven = [s for s in mine if not s.proven]
        idle_unproven = [s for s in unproven if not s.busy()]
        if len(unproven) >= self.unproven_cap and idle_unproven:
            self._drop(mine, idle_unproven[0])
        elif len(mine) >= self.cap:
            victim = self._victim(mine)
            if victim is None:
                return False
            self._drop(mine, victim)
        mine.append(slot)
        return True

    def release(self, address: str, slot: Slot) -> None:
        mine = self.live.get(address)
        if mine is not None:
            if slot in mine:
                mine.remove(slot)
            if not mine:
                del self.live[address]

    def count(self, address: str) -> int:
        return sum(not s.closing() for s in self.live.get(address, ()))

    def _victim(self, mine: list[Slot]) -> Slot | None:
        now = time.monotonic()
        for s in mine:
            if not s.proven and not s.busy():
                return s
        for s in mine:
            since = s.reading_since()
            if not s.busy() and since is not None and now - since >= self.grace:
                return s
        for s in mine:
            if not s.busy() and s.reading_since() is None and now - s.idle_since() >= self.grace:
                return s
        return None

    def _drop(self, mine: list[Slot], victim: Slot) -> None:
        mine.remove(victim)
        self.displaced += 1
        victim.displace()
