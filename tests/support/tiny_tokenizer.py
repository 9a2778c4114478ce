"""A character-level tokenizer for the tiny VoxCPM2 test models (PyTorch and MLX), built with `tokenizers`.

One token per ASCII character ("▁" for space), the four audio tokens at the ids VoxCPM2 hard-codes (101-104), byte
fallback so any text encodes, and optionally CJK punctuation, kana, every CJK unified ideograph and the full-width
forms. Saved the way `LlamaTokenizerFast` / `AutoTokenizer` load it.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

# Ids VoxCPM2 hard-codes (audio_start_token etc.); the tokenizer reserves them as special tokens.
AUDIO_TOKENS = {
    101: "<|audio_start|>",
    102: "<|audio_end|>",
    103: "<|ref_audio_start|>",
    104: "<|ref_audio_end|>",
}
_CJK_RANGES = ((0x3000, 0x30FF), (0x4E00, 0x9FFF), (0xFF00, 0xFFEF))


def vocabulary(cjk: bool) -> dict[str, int]:
    tokens = ["<unk>", "<s>", "</s>", "▁"] + [chr(c) for c in range(0x21, 0x7F)]
    tokens += [f"<|reserved_{i}|>" for i in range(len(tokens), min(AUDIO_TOKENS))]
    tokens += [AUDIO_TOKENS[i] for i in sorted(AUDIO_TOKENS)]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    if cjk:
        for first, last in _CJK_RANGES:
            tokens += [chr(c) for c in range(first, last + 1)]
    vocab = {token: index for index, token in enumerate(tokens)}
    assert all(vocab[token] == index for index, token in AUDIO_TOKENS.items())
    return vocab


def write_tokenizer(
    folder: pathlib.Path, *, max_length: int, cjk: bool, extra_config: dict[str, Any] | None = None
) -> int:
    """Write `tokenizer.json` and `tokenizer_config.json` into `folder`; returns the vocabulary size."""
    vocab = vocabulary(cjk)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    specials = [token for token in vocab if token in ("<unk>", "<s>", "</s>") or token.startswith("<|")]
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in specials])
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "LlamaTokenizer",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        **(extra_config or {}),
        "legacy": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_length,
        "added_tokens_decoder": {
            str(vocab[token]): {
                "content": token,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for token in specials
        },
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
    return len(vocab)
