"""Every lexicon a request can name: those stored here, and those another node of the fleet has (POLYTTS_PEERS),
fetched, checked as an upload is, and stored, as voices are (lifecycle.catalog): a request naming a lexicon works on
any node."""

from __future__ import annotations

import asyncio
import logging

from errors import InvalidInput
from lexicons.lexicon import Lexicon, check_lexicon_id, from_bundle
from lexicons.store import LexiconStore
from voicebank.peers import Peers

log = logging.getLogger("polytts.lexicons")


class LexiconCatalog:
    def __init__(self, store: LexiconStore, peers: Peers, max_entries: int) -> None:
        self.store = store
        self.peers = peers
        self.max_entries = max_entries

    async def resolve(self, lexicon_id: str) -> Lexicon:
        """The lexicon an id names: stored here, or fetched from the first peer that has it; a 422
        `invalid_lexicon_id` for an id that is not one, a 404 `lexicon_not_found` for one no node has."""
        check_lexicon_id(lexicon_id)
        if lexicon_id not in self.store and self.peers:
            await self._from_peers(lexicon_id)
        return self.store.get(lexicon_id)

    async def _from_peers(self, lexicon_id: str) -> None:
        """A peer's bundle of the lexicon, checked against its id and bounds, then stored; one refused is logged
        and stays missing (its 404 follows)."""
        data = await self.peers.lexicon(lexicon_id)
        if data is None:
            return
        try:
            lexicon = from_bundle(data, lexicon_id, self.max_entries)
        except (ValueError, InvalidInput) as exc:
            log.warning("a peer's lexicon %s is refused: %s", lexicon_id, exc)
            return
        await asyncio.to_thread(self.store.put, lexicon)
