"""Deepgram's text-to-speech API (Aura) as PolyTTS speaks it, without a web framework: the query of `/v1/speak`
(model, encoding, sample rate, container, bit rate), model names as voices, the WebSocket's messages, the answer's
`dg-` headers and the error body.

Shapes follow Deepgram's API reference and the official `deepgram-sdk` package (requirements-dev.txt pins the version
the tests drive the routes with); Pipecat's and LiveKit's Deepgram services read the same shapes.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from audio.encoding import AudioFormat
from audio.output import Output, SampleEncoding
from errors import InvalidInput, NotFound, ServiceError
from lifecycle.request_context import REQUEST_ID

PREFIX = "/deepgram"
"""Where the front lives: a client's base URL is `http://<node>/deepgram` (its WebSocket URL
`ws://<node>/deepgram/v1/speak`), and it appends `/v1/speak` itself; LiveKit's plugin takes the whole URL."""

Encoding = Literal["linear16", "mulaw", "alaw", "mp3", "opus", "flac", "aac"]
Container = Literal["none", "wav", "ogg"]


@dataclass(frozen=True)
class EncodingSpec:
    """What Deepgram answers in one encoding: its sample rates (the first is the default), its containers (the first
    is the REST default), its bit rates (None: not configurable; the first is the default) and the audio it is."""

    rates: tuple[int, ...]
    containers: tuple[Container, ...]
    fmt: AudioFormat
    samples: SampleEncoding = "s16le"
    bit_rates: tuple[int, ...] | None = None
    bit_rate_range: tuple[int, int] | None = None


ENCODINGS: dict[str, EncodingSpec] = {
    # Deepgram's table of audio format combinations: raw samples in a WAV or no container, codecs at a fixed rate.
    "linear16": EncodingSpec((24000, 8000, 16000, 32000, 48000), ("wav", "none"), "pcm"),
    "mulaw": EncodingSpec((8000, 16000), ("wav", "none"), "pcm", "mulaw"),
    "alaw": EncodingSpec((8000, 16000), ("wav", "none"), "pcm", "alaw"),
    "mp3": EncodingSpec((22050,), ("none",), "mp3", bit_rates=(48000, 32000)),
    "opus": EncodingSpec((48000,), ("ogg",), "opus", bit_rate_range=(4000, 650000)),
    "flac": EncodingSpec((48000, 8000, 16000, 22050, 32000), ("none",), "flac"),
    "aac": EncodingSpec((22050,), ("none",), "aac", bit_rate_range=(4000, 192000)),
}
"""Every encoding answered; `linear16`, `mulaw` and `alaw` also on the WebSocket, always without a container."""
REST_DEFAULT_ENCODING = "mp3"
SOCKET_ENCODINGS = ("linear16", "mulaw", "alaw")
DEFAULT_BIT_RATES = {"opus": 12000, "aac": 48000}


class SpeakQuery(BaseModel):
    """The query of `POST .../v1/speak` and of the WebSocket `.../v1/speak`; Deepgram's fields that shape its own
    account (`callback`, `tag`, `mip_opt_out`) are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str | None = Field(
        None,
        max_length=256,
        description="`aura-2-<name>-<lang>` or `aura-<name>-<lang>` (a stock voice by the table in docs/api.md), or "
        "any voice this node knows: a built-in voice, a blend or a registered voice id. Default: aura-2-thalia-en.",
    )
    encoding: Encoding | None = Field(
        None,
        description="linear16, mulaw, alaw, mp3, opus, flac or aac (REST; mp3 by default); linear16, mulaw or "
        "alaw on the WebSocket (linear16 by default).",
    )
    sample_rate: float | None = Field(
        None, description="Hz, one the encoding takes (docs/api.md); resampled once from the engine's rate."
    )
    container: Container | None = Field(
        None, description="none (raw samples), wav (linear16, mulaw, alaw), ogg (opus)."
    )
    bit_rate: float | None = Field(None, description="bit/s, for mp3 (32000, 48000), opus and aac.")
    speed: float | None = Field(None, ge=0.7, le=1.5, description="Speaking rate (1 is the voice's own pace).")
    callback: str | None = Field(None, description="Ignored: the audio is the answer.")
    callback_method: str | None = Field(None, description="Ignored.")
    mip_opt_out: bool | None = Field(None, description="Ignored: nothing is kept.")
    tag: str | None = Field(None, description="Ignored.")
    word_timestamps: bool = Field(
        False,
        description="This node's own, not Deepgram's (its service has no word timings): on the WebSocket, after each "
        'phrase\'s audio, `{"type": "Words", "words": [{"word", "start", "end"}]}` (seconds from the start of the live '
        "request's audio) where the engine times words (Kokoro).",
    )

    def output(self, socket: bool) -> Output:
        """The audio this asks for; a 422 that says what is answered otherwise."""
        encoding = self.encoding or ("linear16" if socket else REST_DEFAULT_ENCODING)
        spec = ENCODINGS[encoding]
        if socket and encoding not in SOCKET_ENCODINGS:
            raise _bad_query("encoding", f"{encoding!r} is not streamed; one of {', '.join(SOCKET_ENCODINGS)}")
        container = self.container or ("none" if socket else spec.containers[0])
        if container not in spec.containers or (socket and container != "none"):
            answered = ("none",) if socket else spec.containers
            raise _bad_query("container", f"{container!r} does not take {encoding}; one of {', '.join(answered)}")
        rate = _whole("sample_rate", self.sample_rate, spec.rates[0])
        if rate not in spec.rates:
            rates = ", ".join(map(str, sorted(spec.rates)))
            raise _bad_query("sample_rate", f"{rate} is not one {encoding} takes: {rates}")
        bit_rate = self._bit_rate(encoding, spec)
        fmt: AudioFormat = "wav" if container == "wav" else spec.fmt
        return Output(fmt, rate, spec.samples if fmt in ("pcm", "wav") else "s16le", bit_rate)

    def _bit_rate(self, encoding: str, spec: EncodingSpec) -> int | None:
        if spec.bit_rates is None and spec.bit_rate_range is None:
            if self.bit_rate is not None:
                raise _bad_query("bit_rate", f"{encoding} takes no bit_rate")
            return None
        default = spec.bit_rates[0] if spec.bit_rates else DEFAULT_BIT_RATES[encoding]
        bit_rate = _whole("bit_rate", self.bit_rate, default)
        if spec.bit_rates and bit_rate not in spec.bit_rates:
            raise _bad_query(
                "bit_rate", f"{bit_rate} is not one {encoding} takes: {', '.join(map(str, spec.bit_rates))}"
            )
        if spec.bit_rate_range and not spec.bit_rate_range[0] <= bit_rate <= spec.bit_rate_range[1]:
            low, high = spec.bit_rate_range
            raise _bad_query("bit_rate", f"{bit_rate} is not between {low} and {high} for {encoding}")
        return bit_rate

    def speaking_rate(self) -> float | None:
        return self.speed if self.speed != 1.0 else None  # 1 is every engine's pace; another one goes to the engine

    def model_name(self) -> str:
        return self.model or DEFAULT_MODEL

    def ignored(self) -> list[str]:
        given = self.model_dump(exclude_none=True)
        return [name for name in ("callback", "callback_method", "mip_opt_out", "tag") if name in given]


def _whole(param: str, value: float | None, default: int) -> int:
    """A number of the query as a whole number (the SDK types them as floats: `24000.0` is 24000)."""
    if value is None:
        return default
    if not float(value).is_integer():
        raise _bad_query(param, f"{value} is not a whole number")
    return int(value)


def _bad_query(param: str, message: str) -> InvalidInput:
    return InvalidInput(f"{param}: {message}", code="invalid_output_format", detail={"param": param})


class SpeakBody(BaseModel):
    """Body of `POST .../v1/speak`."""

    model_config = ConfigDict(extra="allow")

    text: str = Field(
        description="Text to speak; longer than POLYTTS_MAX_TEXT_CHARS is a 413, nothing to speak a 422 `empty_text`.",
        json_schema_extra={"minLength": 1},
    )


# --- models as voices ---------------------------------------------------------------------------------------------

DEFAULT_MODEL = "aura-2-thalia-en"
AURA_VOICES: dict[str, dict[str, str]] = {
    # Deepgram's Aura and Aura-2 voices by language, each on a stock Kokoro v1.0 pack of its gender and, where Kokoro
    # has one, its accent (British and Irish voices on `b*` packs); the same name in Aura and Aura-2 is one voice.
    "en": {
        **dict.fromkeys(("thalia", "asteria"), "af_heart"),
        **dict.fromkeys(("andromeda", "stella"), "af_bella"),
        **dict.fromkeys(("helena", "aurora"), "af_nicole"),
        **dict.fromkeys(("luna", "iris"), "af_sky"),
        **dict.fromkeys(("hera", "juno"), "af_sarah"),
        **dict.fromkeys(("cora", "callista"), "af_nova"),
        **dict.fromkeys(("delia", "phoebe"), "af_jessica"),
        **dict.fromkeys(("electra", "harmonia"), "af_kore"),
        **dict.fromkeys(("minerva", "ophelia"), "af_aoede"),
        **dict.fromkeys(("selene", "vesta", "amalthea"), "af_river"),
        **dict.fromkeys(("cordelia", "janus", "theia"), "af_alloy"),
        **dict.fromkeys(("athena", "pandora"), "bf_emma"),
        **dict.fromkeys(("apollo", "orion"), "am_michael"),
        **dict.fromkeys(("arcas", "atlas"), "am_adam"),
        **dict.fromkeys(("aries", "mars"), "am_eric"),
        **dict.fromkeys(("hermes", "jupiter"), "am_fenrir"),
        **dict.fromkeys(("hyperion", "neptune"), "am_liam"),
        **dict.fromkeys(("odysseus", "orpheus"), "am_onyx"),
        **dict.fromkeys(("pluto", "perseus"), "am_puck"),
        **dict.fromkeys(("saturn", "zeus"), "am_echo"),
        **dict.fromkeys(("helios", "draco"), "bm_george"),
        "angus": "bm_lewis",
    },
    "es": {
        **dict.fromkeys(
            ("agustina", "antonia", "carina", "celeste", "diana", "estrella", "gloria", "olivia", "selena", "silvia"),
            "ef_dora",
        ),
        **dict.fromkeys(("alvaro", "aquila", "javier", "luciano", "nestor", "sirio", "valerio"), "em_alex"),
    },
    "fr": dict.fromkeys(("agathe", "hector"), "ff_siwis"),
    "it": {
        **dict.fromkeys(("cinzia", "demetra", "livia", "maia", "melia"), "if_sara"),
        **dict.fromkeys(("cesare", "dionisio", "elio", "flavio"), "im_nicola"),
    },
    "ja": {"ama": "jf_alpha", "izanami": "jf_gongitsune", "uzume": "jf_nezumi", "ebisu": "jm_kumo", "fujin": "jm_kumo"},
}
"""Language -> Aura voice name -> the PolyTTS voice it speaks with. Kokoro has no German or Dutch voice: those models
are refused (a registered voice of that language is named by its id instead)."""
_AURA = re.compile(r"aura-(?:2-)?([a-z]+)-([a-z]{2})")


def model_voice(model: str | None) -> str:
    """The voice a `model` names: an Aura model's stock voice (AURA_VOICES), else the model itself as a voice id of
    this node (a built-in voice, a blend or a registered voice, which the lifecycle resolves); an Aura model this
    node has no voice for is a 404 that says where the table is."""
    name = model or DEFAULT_MODEL
    found = _AURA.fullmatch(name)
    if found is None:
        if name.startswith("aura-"):
            raise _unknown_model(name)
        return name
    voice = AURA_VOICES.get(found.group(2), {}).get(found.group(1))
    if voice is None:
        raise _unknown_model(name)
    return voice


def _unknown_model(name: str) -> NotFound:
    languages = ", ".join(AURA_VOICES)
    return NotFound(
        f"the model {name[:60]!r} has no voice here: aura-2-<name>-<lang> and aura-<name>-<lang> are answered for "
        f"Deepgram's voice names in {languages} (docs/api.md lists them), or name a voice of this node",
        code="model_not_found",
        detail={"param": "model"},
    )


def model_uuid(model: str) -> str:
    """A stable id of a model name, for the answers that carry one (`dg-model-uuid`, `Metadata`)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"polytts:deepgram:{model}"))


def model_headers(model: str) -> dict[str, str]:
    """The `dg-` headers of an answer and of an accepted socket: its request id (the X-Request-Id) and its model."""
    return {"dg-request-id": REQUEST_ID.get() or "", "dg-model-name": model, "dg-model-uuid": model_uuid(model)}


def speak_headers(model: str, text: str) -> dict[str, str]:
    """The `dg-` headers of a REST answer: the model's, and the characters it speaks."""
    return {**model_headers(model), "dg-char-count": str(len(text))}


# --- WebSocket messages -------------------------------------------------------------------------------------------


class SocketMessage(BaseModel):
    """One client message of the WebSocket: `Speak` (text to append), `Flush` (speak what is pending; answered by
    `Flushed` once its audio is out), `Clear` (drop what is pending and queued; answered by `Cleared`) or `Close`."""

    model_config = ConfigDict(extra="allow")

    type: Literal["Speak", "Flush", "Clear", "Close"]
    text: str | None = Field(None, max_length=65_536)


def metadata(model: str) -> dict[str, Any]:
    """The socket's first message."""
    return {
        "type": "Metadata",
        "request_id": REQUEST_ID.get() or "",
        "model_name": model,
        "model_version": "polytts",
        "model_uuid": model_uuid(model),
    }


def warning(code: str, description: str) -> dict[str, Any]:
    """What the node ignores, said without ending the socket: the SDK's model reads `code` and `description`,
    Pipecat and LiveKit read `warn_code` and `warn_msg`, so it carries both."""
    return {"type": "Warning", "code": code, "description": description, "warn_code": code, "warn_msg": description}


def socket_error(exc: ServiceError) -> dict[str, Any]:
    """A live request that failed on the socket (LiveKit's plugin raises on an `Error` message); the socket serves
    on."""
    return {"type": "Error", **error_body(exc), "description": exc.message}


# --- errors -------------------------------------------------------------------------------------------------------


class DeepgramErrorBody(BaseModel):
    """The body of every error the Deepgram routes answer."""

    err_code: str = Field(description="Our stable code, e.g. `model_not_found`, `invalid_output_format`.")
    err_msg: str
    request_id: str = Field(description="The request's X-Request-Id (its dg-request-id).")


def error_body(exc: ServiceError) -> dict[str, Any]:
    return {"err_code": exc.code, "err_msg": exc.message, "request_id": REQUEST_ID.get() or ""}


def handshake_headers(exc: ServiceError) -> dict[str, str]:
    """A refused socket's `dg-request-id` and `dg-error` (its error body as JSON), where Deepgram's clients read the
    reason of a handshake refused: a WebSocket library shows the headers, seldom the body."""
    return {"dg-request-id": REQUEST_ID.get() or "", "dg-error": json.dumps(error_body(exc))}
