"""Other nodes this one may ask for a voice, a lexicon or a pronunciation dictionary it does not know (POLYTTS_PEERS): their bundles, fetched
with short timeouts, so an unknown id is answered (or refused) quickly, never turned into a hang."""

from __future__ import annotations

import asyncio
import logging

import httpx

log = logging.getLogger("polytts.peers")


class Peers:
    def __init__(self, urls: list[str], api_key: str, timeout_s: float, max_bytes: int) -> None:
        self.urls = [url.rstrip("/") for url in urls]
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 2.0))
        self.max_bytes = max_bytes
        self._fetching: dict[str, asyncio.Task[bytes | None]] = {}

    def __bool__(self) -> bool:
        return bool(self.urls)

    async def bundle(self, voice_id: str) -> bytes | None:
        """The voice's bundle from the first peer that has it, or None; concurrent asks for one id share a fetch."""
        return await self._fetch(f"/voices/{voice_id}/bundle", f"voice {voice_id}")

    async def lexicon(self, lexicon_id: str) -> bytes | None:
        """The lexicon's bundle (its canonical content) from the first peer that has it, or None."""
        return await self._fetch(f"/lexicons/{lexicon_id}/bundle", f"lexicon {lexicon_id}")

    async def dictionary(self, dictionary_id: str) -> bytes | None:
        """A pronunciation dictionary's record (its name and versions) from the first peer that keeps it, or None."""
        return await self._fetch(f"/lexicons/dictionaries/{dictionary_id}/bundle", f"dictionary {dictionary_id}")

    async def _fetch(self, path: str, what: str) -> bytes | None:
        task = self._fetching.get(path)
        if task is None:
            task = self._fetching[path] = asyncio.ensure_future(self._ask_each(path, what))
            task.add_done_callback(lambda _: self._fetching.pop(path, None))
        return await asyncio.shield(task)

    async def _ask_each(self, path: str, what: str) -> bytes | None:
        async with httpx.AsyncClient(timeout=self.timeout, headers=self.headers) as client:
            for url in self.urls:
                try:
                    async with client.stream("GET", f"{url}{path}") as response:
                        if response.status_code == 404:
                            continue
                        if response.status_code != 200:
                            log.warning("peer %s answered %d for %s", url, response.status_code, what)
                            continue
                        body = bytearray()
                        async for chunk in response.aiter_bytes():
                            body += chunk
                            if len(body) > self.max_bytes:
                                raise ValueError(f"its bundle is larger than {self.max_bytes} bytes")
                        log.info("%s fetched from peer %s", what, url)
                        return bytes(body)
                except (httpx.HTTPError, ValueError) as exc:
                    log.warning("peer %s could not give %s: %s", url, what, exc)
        return None
