"""Arrivals: the editor's completion requests as the language server read them.

Under rapid typing an editor sends didChange, request, didChange, request, … faster than
completions finish. The server reads its input in chunks (lsp/protocol.py: `read_frames`) and
handles every message of a chunk before any request's handler runs, so by the time one runs,
a newer request on its document — or a newer edit — may already have been read. Such a request
is stale: it is answered without a decode (RequestCancelled when a newer request replaced it,
ContentModified when the document changed under it), and only the newest runs.

    arrivals.arrived(params, uri, document)    # at dispatch: the document as it is now, the time
    arrival = arrivals.take(params)            # in the handler (None if it never arrived here)
    arrivals.superseded(arrival)               # a newer request on arrival.uri has arrived since
    arrival.document / arrival.at              # what to complete / when it arrived (time.monotonic())

Requests are matched by their params object (the one pygls hands the handler). At most
`capacity` untaken arrivals are kept (a request cancelled before its handler ran is never taken)."""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from dataclasses import dataclass

from lsp.documents import Document


@dataclass(frozen=True)
class Arrival:
    uri: str
    at: float  # time.monotonic() when the request was read
    document: Document | None  # the document as it was then (a snapshot); None if it was not open
    seq: int  # arrival order, over every document
    params: object  # the request's params (kept so that their id stays theirs)


class Arrivals:
    def __init__(self, capacity: int = 1024):
        self.capacity = capacity
        self._seq = itertools.count()
        self._newest: dict[str, int] = {}  # uri -> seq of the newest request read on it
        self._waiting: OrderedDict[int, Arrival] = OrderedDict()  # id(params) -> not yet taken

    def arrived(self, params: object, uri: str, document: Document | None) -> None:
        arrival = Arrival(uri, time.monotonic(), None if document is None else document.snapshot(),
                          next(self._seq), params)
        self._newest[uri] = arrival.seq
        self._waiting[id(params)] = arrival
        while len(self._waiting) > self.capacity:
            self._waiting.popitem(last=False)

    def take(self, params: object) -> Arrival | None:
        arrival = self._waiting.pop(id(params), None)
        return arrival if arrival is not None and arrival.params is params else None

    def superseded(self, arrival: Arrival) -> bool:
        """Whether a newer request on the arrival's document has been read since."""
        return self._newest.get(arrival.uri, arrival.seq) != arrival.seq

    def forget(self, uri: str) -> None:
        """The document was closed."""
        self._newest.pop(uri, None)
