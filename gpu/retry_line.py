"""The line of clients refused with a 429: each holds a place, and the Retry-After it is told brings it back at its
place's time, or sooner: never later than `max_retry_after_s`, so that its time can be told again when places ahead
have moved up. A place whose holder has not come back `retry_grace_s` after the time it was told lapses, and every
place behind it moves up: clients that never come back hold places for one such window at most.

A client is known by its fairness key and address. Clients that share both cannot be told apart: whichever of them
comes back first takes the place of theirs that came due first."""

from __future__ import annotations

import bisect
import collections
import heapq
import itertools
import math
from dataclasses import dataclass

from gpu.scheduling_settings import SchedulingSettings

Holder = tuple[str, str | None]
"""Who holds a place: a fairness key and a client address (None in process)."""

MAX_PLACES = 10_000
"""Places held at once: a client refused beyond it is told its time in line but holds no place."""


@dataclass
class Place:
    holder: Holder
    seq: int
    """Its order in line: places further ahead have lower ones."""
    due: float
    """When its holder was told to come back."""


class RetryLine:
    """The places of refused clients, in the order they were first refused."""

    def __init__(self, settings: SchedulingSettings) -> None:
        self.settings = settings
        self._order: list[int] = []
        """The seqs of the places held, ascending: a place's index here is how many are ahead of it."""
        self._places: dict[int, Place] = {}
        self._due_of: dict[Holder, list[tuple[float, int]]] = {}
        """Each holder's places by when they come due (a heap; entries whose place has been told again are stale)."""
        self._lapsing: list[tuple[float, int]] = []
        """Every place by when it comes due (a heap, stale entries alike)."""
        self._held: collections.Counter[Holder] = collections.Counter()
        self._seqs = itertools.count()

    def __len__(self) -> int:
        return len(self._order)

    def refused(self, holder: Holder, earliest: float, step: float, now: float) -> float:
        """Retry-After for a client of `holder` refused now, `earliest` being when room should be made and `step`
        the time each place ahead of it takes: a client coming back keeps its place, a new one joins the end."""
        self._lapse(now)
        place = self._returning(holder, now)
        ahead = len(self._order) if place is None else bisect.bisect_left(self._order, place.seq)
        wait = self._bounded(max(earliest, now) + ahead * step - now)
        if place is None and len(self._order) < MAX_PLACES:
            place = Place(holder, next(self._seqs), now + wait)
            self._order.append(place.seq)
            self._places[place.seq] = place
            self._held[holder] += 1
        elif place is not None:
            place.due = now + wait
        if place is not None:
            heapq.heappush(self._due_of.setdefault(holder, []), (place.due, place.seq))
            heapq.heappush(self._lapsing, (place.due, place.seq))
        return wait

    def admitted(self, holder: Holder, now: float) -> None:
        """A client of `holder` was admitted: the place of theirs that came due, if any, is served."""
        self._lapse(now)
        place = self._returning(holder, now)
        if place is not None:
            self._drop(place)

    def _bounded(self, wait: float) -> float:
        """The wait itself when it is within `max_retry_after_s`; else a time in the second half of that window,
        chosen so that the holder's last return falls on its place's time, and a crowd told at once comes back
        spread over the window as its places are spread."""
        longest = self.settings.max_retry_after_s
        if wait <= longest:
            return wait
        half = longest / 2
        return half + math.fmod(wait - longest, half)

    def _returning(self, holder: Holder, now: float) -> Place | None:
        """The holder's place that came due first, if one has (its holder is back)."""
        due = self._due_of.get(holder)
        while due:
            at, seq = due[0]
            place = self._places.get(seq)
            if place is None or place.due != at:
                heapq.heappop(due)  # stale: served, lapsed or told again
                continue
            return place if at <= now else None
        return None

    def _lapse(self, now: float) -> None:
        """Places whose holders are later than `retry_grace_s` past their time lapse."""
        grace = self.settings.retry_grace_s
        while self._lapsing and self._lapsing[0][0] + grace < now:
            at, seq = heapq.heappop(self._lapsing)
            place = self._places.get(seq)
            if place is not None and place.due == at:
                self._drop(place)

    def _drop(self, place: Place) -> None:
        del self._places[place.seq]
        del self._order[bisect.bisect_left(self._order, place.seq)]
        self._held[place.holder] -= 1
        if not self._held[place.holder]:
            del self._held[place.holder]
            del self._due_of[place.holder]
