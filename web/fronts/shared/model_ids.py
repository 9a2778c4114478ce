"""A vendor's `model_id` as an engine of this node, for the fronts whose vendors name their models on every request
(ElevenLabs' `eleven_...`, Cartesia's `sonic...`)."""

from __future__ import annotations

from collections.abc import Collection

from errors import NotFound


def model_engine(model_id: str | None, engines: Collection[str], vendor_models: str) -> str | None:
    """The engine a `model_id` asks for: the vendor's own models (ids starting with `vendor_models`) mean the
    voice's own engine (None); a PolyTTS engine name means that engine, whose voice the request must name; anything
    else is a 404 that lists what is accepted."""
    if model_id is None or model_id.startswith(vendor_models):
        return None
    if model_id in engines:
        return model_id
    accepted = [f"{vendor_models}* (the voice's engine)", *sorted(engines)]
    raise NotFound(
        f"the model {model_id[:40]!r} does not exist here. Accepted: {', '.join(accepted)}",
        code="model_not_found",
        detail={"param": "model_id"},
    )
