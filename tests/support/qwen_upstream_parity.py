"""By hand, when a pin changes: does Qwen3-TTS through engines/qwen_import.py (qwen-tts-hf on this venv's
Transformers) compute what the official qwen-tts 0.1.1 computes on its own Transformers 4.57.3?

Both run on the same tiny random checkpoint (tests/support/tiny_qwen_torch.py) on the CPU in float32, and dump the reference
codes and speaker embeddings of a 1 s and a 12 s clip (the latter past the codec encoder's 250-step attention window),
greedy and seeded-sampled codes in each prompt mode, and decoded audio; `compare` wants them equal. A reference venv:

    python3.11 -m venv /tmp/qwen-ref
    /tmp/qwen-ref/bin/pip install torch==2.13.0 transformers==4.57.3 accelerate==1.12.0 librosa==0.11.0 \\
        soundfile==0.14.0 einops==0.8.2 onnxruntime==1.32.0 safetensors==0.8.0 numpy==2.4.6
    /tmp/qwen-ref/bin/pip install --no-deps qwen-tts==0.1.1

then, from the repository root (with `export PYTHONPATH=.`):

    .venv/bin/python tests/support/qwen_upstream_parity.py build /tmp/parity/model
    .venv/bin/python tests/support/qwen_upstream_parity.py dump /tmp/parity/model /tmp/parity/ours.npz
    /tmp/qwen-ref/bin/python tests/support/qwen_upstream_parity.py dump /tmp/parity/model /tmp/parity/upstream.npz
    .venv/bin/python tests/support/qwen_upstream_parity.py compare /tmp/parity/ours.npz /tmp/parity/upstream.npz

Measured on 2026-11-30 (qwen-tts-hf 0.1.1.post1 on transformers 5.24.0 against qwen-tts 0.1.1 on 4.57.3): every
array equal, bit for bit.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np


def load(folder: str) -> Any:
    import torch
    import transformers

    torch.set_num_threads(1)
    if transformers.__version__.startswith("4."):  # the official package on its own Transformers
        from engines.import_stubs import stub_if_missing

        stub_if_missing("torchaudio.compliance.kaldi", "not used by the 12 Hz checkpoints")
        stub_if_missing("sox", "not used by the 12 Hz checkpoints")
        import qwen_tts

        return qwen_tts.Qwen3TTSModel.from_pretrained(folder, dtype=torch.float32)
    from engines.qwen.upstream import CODEC_KEY_MAPPING, import_qwen_tts

    return import_qwen_tts().Qwen3TTSModel.from_pretrained(folder, dtype=torch.float32, key_mapping=CODEC_KEY_MAPPING)


def dump(folder: str, out: str) -> None:
    import torch

    model = load(folder)

    def codes(text: str, item: Any, language: str, non_streaming: bool, **sampling: Any) -> np.ndarray:
        ref_ids = [model._tokenize_texts([model._build_ref_text(item.ref_text)])[0] if item.icl_mode else None]
        generated, _ = model.model.generate(
            input_ids=model._tokenize_texts([model._build_assistant_text(text)]),
            ref_ids=ref_ids,
            voice_clone_prompt=model._prompt_items_to_voice_clone_prompt([item]),
            languages=[language],
            non_streaming_mode=non_streaming,
            **model._merge_generate_kwargs(max_new_tokens=12, **sampling),
        )
        return generated[0].numpy()

    greedy = {"do_sample": False, "subtalker_dosample": False}
    found: dict[str, np.ndarray] = {}
    rng = np.random.default_rng(7)
    for name, seconds in (("short", 1.0), ("long", 12.0)):
        t = np.arange(int(seconds * 16_000)) / 16_000
        wav = 0.3 * np.sin(2 * np.pi * 220 * t) * (1 + np.sin(2 * np.pi * 0.7 * t)) + 0.02 * rng.standard_normal(t.size)
        [item] = model.create_voice_clone_prompt(ref_audio=(wav.astype(np.float32), 16_000), ref_text="a reference")
        [xvec] = model.create_voice_clone_prompt(ref_audio=(wav.astype(np.float32), 16_000), x_vector_only_mode=True)
        found[f"{name}_ref_codes"] = item.ref_code.numpy()
        found[f"{name}_speaker"] = item.ref_spk_embedding.float().numpy()
        found[f"{name}_greedy"] = codes("Hello world, this is a test.", item, "english", False, **greedy)
        found[f"{name}_greedy_auto_non_streaming"] = codes("Hello world.", item, "auto", True, **greedy)
        found[f"{name}_greedy_xvector"] = codes("Hi there.", xvec, "english", False, **greedy)
        torch.manual_seed(1234)
        found[f"{name}_sampled"] = codes(
            "Sampled speech.",
            item,
            "english",
            False,
            temperature=0.8,
            top_k=20,
            top_p=0.9,
            repetition_penalty=1.1,
            subtalker_temperature=0.7,
            subtalker_top_k=30,
            subtalker_top_p=0.95,
        )
        both = torch.cat([item.ref_code, torch.from_numpy(found[f"{name}_greedy"])])
        found[f"{name}_audio"] = model.model.speech_tokenizer.decode([{"audio_codes": both}])[0][0]
    np.savez(out, **found)  # type: ignore[arg-type]  # numpy's stub gives every keyword the type of allow_pickle


def compare(ours: str, upstream: str) -> int:
    a, b = np.load(ours), np.load(upstream)
    differ = sorted(name for name in a.files if a[name].shape != b[name].shape or not np.array_equal(a[name], b[name]))
    for name in differ:
        print(f"{name}: differs (max abs {np.max(np.abs(a[name].astype(float) - b[name].astype(float))):.3g})")
    print(f"{len(a.files) - len(differ)} of {len(a.files)} arrays equal")
    return 1 if differ or set(a.files) != set(b.files) else 0


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "build":
        sys.path.insert(0, str(Path(__file__).parent))
        from tests.support.tiny_qwen_torch import build_tiny_qwen_torch

        build_tiny_qwen_torch(Path(args[0]))
    elif command == "dump":
        dump(*args)
    else:
        sys.exit(compare(*args))
