"""A front's speech request spoken through the lifecycle, once it is translated into the service's own: its refusals
before the lifecycle saw it counted as the lifecycle's are, and the headers of its answer."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from audio.output import Output
from errors import ServiceError
from lifecycle.request_context import RequestContext
from lifecycle.requests import SpeechRequest
from lifecycle.speech import Speech
from lifecycle.synthesis import SynthesisService


@contextlib.contextmanager
def counted_refusal(synthesis: SynthesisService, ctx: RequestContext) -> Iterator[None]:
    """A refusal raised inside, before the lifecycle has planned the request (a bad output format, an unknown
    model), logged and counted as the lifecycle's own refusals are."""
    try:
        yield
    except ServiceError as exc:
        synthesis.rejected(ctx.route, exc, ctx.client)
        raise


async def speak_translated(
    synthesis: SynthesisService,
    native: SpeechRequest,
    audio: Output,
    ctx: RequestContext,
    *,
    timed: bool,
    ignored: Sequence[str],
) -> tuple[Speech, dict[str, str]]:
    """Speak a front's request, translated into the service's own (`native`, a `TTSRequest`), in `audio`; with its
    answer's headers: the lifecycle's, the rate and sample encoding of `audio` (X-Sample-Rate, X-Audio-Format) and
    the request's fields this node ignores (X-Ignored-Parameters)."""
    speech = await synthesis.speak(native, ctx, timed=timed)
    headers = {
        **speech.headers("pcm"),
        "X-Sample-Rate": str(audio.rate(speech.plan.engine.sample_rate)),
        "X-Audio-Format": audio.encoding if audio.fmt in ("pcm", "wav") else audio.fmt,
    }
    if ignored:
        headers["X-Ignored-Parameters"] = ", ".join(ignored)
    return speech, headers
