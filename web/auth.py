"""Who a request is: API keys (checked before anything else is read) and the fairness key a request counts against.

With `POLYTTS_API_KEYS` set, every route but the public ones needs a key (`Authorization: Bearer <key>`, or the
schemes, headers and query parameters the fronts' clients send theirs in: `Front.key_schemes`, `Front.key_headers`,
`Front.key_queries`; the 401 lists every way), and the key's name is the request's fairness key; a header cannot claim
another identity. Without keys, the fairness key is the `X-Fairness-Key` header, else the anonymous key. A name
grants nothing by itself: weights come from configuration.
"""

from __future__ import annotations

import base64
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from starlette.datastructures import Headers, QueryParams
from starlette.types import ASGIApp, Receive, Scope, Send

from errors import InvalidInput, ServiceError, Unauthorized
from gpu.jobs import ANONYMOUS
from jobs.webhook import webhook_secret
from web.front_spec import Front
from web.http_errors import refuse

MAX_FAIRNESS_KEY_CHARS = 64
_KEY_SUBPROTOCOL = "bearer."
"""A WebSocket subprotocol that carries a key, `bearer.<key in unpadded base64url>`: a browser cannot set headers on
a WebSocket, and a subprotocol never appears in access logs (a query does)."""


def _either(ways: Sequence[str]) -> str:
    """`a`, `a or b`, `a, b or c`."""
    return ways[0] if len(ways) == 1 else f"{', '.join(ways[:-1])} or {ways[-1]}"


def key_required(fronts: Sequence[Front]) -> str:
    """The 401's message: every way a client may give its key, so that one sending it another way learns the right
    one."""
    headers = [f"`{header.name}: <key>` ({header.clients})" for front in fronts for header in front.key_headers]
    schemes = [f"`Authorization: {scheme} <key>`" for front in fronts for scheme in front.key_schemes]
    queries = [f"`{name}`" for front in fronts for name in front.key_queries]
    in_query = f"the {_either(queries)} query parameter, or " if queries else ""
    ways = ["`Authorization: Bearer <key>`", *schemes, *headers]
    return (
        f"a valid API key is required: send it as {_either(ways)}; on a "
        f"WebSocket also as {in_query}the `{_KEY_SUBPROTOCOL}<key>` subprotocol"
    )


@dataclass(frozen=True)
class Identity:
    principal: str
    """The fairness key the request counts against."""
    admin: bool
    """Whether it may use the admin routes: it holds an admin key, or the node has no keys at all."""
    webhook_secret: str = ""
    """What its jobs' webhooks are signed with, derived from its key (jobs.webhook)."""


class ApiKeys:
    """The configured keys, looked up in constant time: each is compared with `hmac.compare_digest`, so a response's
    timing says nothing about how much of a guess was right. Admin keys work wherever an ordinary key does. A key
    comes as `Authorization: Bearer`, or in a header or (on a WebSocket) a query parameter of a front's clients."""

    def __init__(self, keys: Mapping[str, str], admin_keys: Mapping[str, str] | None, fronts: Sequence[Front]) -> None:
        self._keys = [(secret.encode(), name, False) for secret, name in keys.items()]
        self._keys += [(secret.encode(), name, True) for secret, name in (admin_keys or {}).items()]
        self.headers = [header.name for front in fronts for header in front.key_headers]
        self.queries = [name for front in fronts for name in front.key_queries]
        self.schemes = {"bearer", *(scheme.lower() for front in fronts for scheme in front.key_schemes)}
        self.required = key_required(fronts)

    def __bool__(self) -> bool:
        return bool(self._keys)

    def _lookup(self, token: str) -> Identity | None:
        given = token.encode()
        found = None
        for secret, name, admin in self._keys:
            if hmac.compare_digest(secret, given):  # no early exit: every key is compared
                found = Identity(name, admin, webhook_secret(token))
        return found

    def query_key(self, query: QueryParams) -> str | None:
        """A WebSocket's key in its query string, where its front's clients send it."""
        return next((query[name] for name in self.queries if query.get(name)), None)

    def identify(
        self, headers: Headers, subprotocols: list[str] | None = None, query_key: str | None = None
    ) -> Identity:
        """Who a request is, or Unauthorized/InvalidInput; a WebSocket's key may come as a subprotocol, or as the
        `query_key` parameter."""
        if self:
            scheme, _, token = headers.get("authorization", "").partition(" ")
            offered = [_subprotocol_key(p) for p in subprotocols or [] if p.startswith(_KEY_SUBPROTOCOL)]
            offered += [key for key in (*(headers.get(name) for name in self.headers), query_key) if key]
            if scheme.lower() not in self.schemes and offered:
                scheme, token = "bearer", offered[0]
            identity = self._lookup(token.strip()) if scheme.lower() in self.schemes else None
            if identity is None:
                raise Unauthorized(self.required, code="unauthorized")
            return identity
        key = headers.get("x-fairness-key", "").strip()
        if key and not (len(key) <= MAX_FAIRNESS_KEY_CHARS and key.isprintable()):
            raise InvalidInput(
                f"X-Fairness-Key must be at most {MAX_FAIRNESS_KEY_CHARS} printable characters",
                code="invalid_fairness_key",
            )
        return Identity(key or ANONYMOUS, admin=True, webhook_secret=webhook_secret(key or ANONYMOUS))


def is_public(path: str, public: tuple[str, ...]) -> bool:
    """Whether `path` is one of the `public` paths or lies under one."""
    return any(path == prefix or path.startswith(prefix + "/") for prefix in public)


class Authenticate:
    """ASGI middleware: decides a request's principal before any route reads its body, so an unauthenticated client
    gets its 401 without the server parsing (or even receiving) what it sent, and the refusal is logged and counted
    (`http_errors.refuse`). Public paths pass without a key; the identity is None there when none was given."""

    def __init__(
        self, app: ASGIApp, keys: ApiKeys, public: tuple[str, ...], retry_after: float, fronts: Sequence[Front]
    ) -> None:
        self.app = app
        self.keys = keys
        self.public = public
        self.retry_after = retry_after
        self.fronts = fronts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        try:
            websocket = scope["type"] == "websocket"
            query_key = self.keys.query_key(QueryParams(scope["query_string"])) if websocket else None
            identity: Identity | None = self.keys.identify(Headers(scope=scope), scope.get("subprotocols"), query_key)
        except ServiceError as exc:
            # A WebSocket is refused before its handshake completes, even on a public path.
            if scope["type"] == "websocket" or not is_public(scope["path"], self.public):
                await refuse(exc, self.retry_after, self.fronts, scope, receive, send)
                return
            identity = None
        scope.setdefault("state", {})["identity"] = identity
        await self.app(scope, receive, send)


def _subprotocol_key(subprotocol: str) -> str:
    """The key inside `bearer.<unpadded base64url>` ("" when it does not decode)."""
    encoded = subprotocol.removeprefix(_KEY_SUBPROTOCOL)
    try:
        return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return ""
