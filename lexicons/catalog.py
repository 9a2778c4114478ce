"""Every lexicon a request can name: those stored here, and those another node of the fleet has (POLYTTS_PEERS),
fetched, checked as an upload is, and stored, as voices are (lifecycle.catalog): a request naming a lexicon works on
any node. So does one naming a vendor front's pronunciation dictionary (lexicons.dictionaries) that another node keeps:
its record is asked of the peers each time (a dictionary changes; the lexicon a version names never does)."""

from __future__ import annotations

import asyncio
import logging

from errors import NotFound, ServiceError
from lexicons.dictionaries import DICTIONARY_ID, Dictionary, DictionaryStore
from lexicons.lexicon import Lexicon, check_lexicon_id, from_bundle
from lexicons.store import LexiconStore
from voicebank.peers import Peers

log = logging.getLogger("polytts.lexicons")


class LexiconCatalog:
    def __init__(self, store: LexiconStore, dictionaries: DictionaryStore, peers: Peers, max_entries: int) -> None:
        self.store = store
        self.dictionaries = dictionaries
        self.peers = peers
        self.max_entries = max_entries

    async def resolve(self, lexicon_id: str) -> Lexicon:
        """The lexicon an id names: stored here, or fetched from the first peer that has it; a 422
        `invalid_lexicon_id` for an id that is not one, a 404 `lexicon_not_found` for one no node has."""
        check_lexicon_id(lexicon_id)
        if lexicon_id not in self.store and self.peers:
            await self._from_peers(lexicon_id)
        return self.store.get(lexicon_id)

    async def version(self, dictionary_id: str, version_id: str | None) -> Lexicon:
        """The lexicon a dictionary's locator names (its `version_id`, or its latest version), the dictionary kept
        here or by a peer; a 404 `dictionary_not_found` for one no node keeps or a version it lacks."""
        if dictionary_id in self.dictionaries or not self.peers or not DICTIONARY_ID.match(dictionary_id):
            dictionary = self.dictionaries.get(dictionary_id)
        else:
            dictionary = await self._dictionary_from_peers(dictionary_id)
        return await self.resolve(dictionary.version(version_id))

    async def _dictionary_from_peers(self, dictionary_id: str) -> Dictionary:
        data = await self.peers.dictionary(dictionary_id)
        if data is not None:
            try:
                return Dictionary.from_bundle(data, dictionary_id)
            except ValueError as exc:
                log.warning("a peer's dictionary %s is refused: %s", dictionary_id, exc)
        raise NotFound(f"no pronunciation dictionary {dictionary_id} here nor on any peer", code="dictionary_not_found")

    async def _from_peers(self, lexicon_id: str) -> None:
        """A peer's bundle of the lexicon, checked against its id and bounds, then stored; one refused is logged
        and stays missing (its 404 follows)."""
        data = await self.peers.lexicon(lexicon_id)
        if data is None:
            return
        try:
            lexicon = from_bundle(data, self.max_entries, lexicon_id)
        except ServiceError as exc:
            log.warning("a peer's lexicon %s is refused: %s", lexicon_id, exc)
            return
        await asyncio.to_thread(self.store.put, lexicon)
