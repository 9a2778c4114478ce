"""The torchaudio operations the cloning engines' inference paths call (dots.tts all three, CosyVoice's frontend the
Kaldi filterbank), for hosts where torchaudio cannot be installed.

dots.tts resamples its prompt audio (`torchaudio.functional.resample`, Kaiser-windowed sinc), resamples again for its
speaker encoder (`torchaudio.transforms.Resample`, Hann-windowed sinc) and takes Kaldi filterbanks for it
(`torchaudio.compliance.kaldi.fbank`). No torchaudio release matches the torch pinned here (2.13.0; torchaudio's
last is 2.11.1, and the PyPI wheels are CUDA builds whose import fails beside the CPU torch), and `import dots_tts`
refuses a torchaudio whose minor version differs from torch's. These are those operations ported from torchaudio
2.11.1 (`functional/functional.py`, `transforms/_transforms.py`, `compliance/kaldi.py`; BSD-2-Clause, see NOTICE),
the same arithmetic on the same defaults, cut down to the options the engines pass. engines/dots/upstream.py and
engines/cosyvoice/upstream.py put them in place of torchaudio when torchaudio does not import.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

KAISER_BETA = 14.769656459379492
"""torchaudio's default Kaiser window shape."""


def _sinc_resample_kernel(
    orig_freq: int,
    new_freq: int,
    gcd: int,
    lowpass_filter_width: int,
    rolloff: float,
    resampling_method: str,
    dtype: torch.dtype | None = None,
    device: torch.device | None = None,
) -> tuple[Tensor, int]:
    """The filter bank; computed in float64 unless `dtype` is given (as `resample` gives its waveform's)."""
    if resampling_method not in ("sinc_interp_hann", "sinc_interp_kaiser"):
        raise ValueError(f"Invalid resampling method: {resampling_method}")
    if lowpass_filter_width <= 0:
        raise ValueError("Low pass filter width should be positive.")
    orig_freq, new_freq = int(orig_freq) // gcd, int(new_freq) // gcd
    base_freq = min(orig_freq, new_freq) * rolloff  # anti-aliasing (and no edge artefacts when upsampling)
    width = math.ceil(lowpass_filter_width * orig_freq / base_freq)
    idx_dtype = dtype if dtype is not None else torch.float64
    idx = torch.arange(-width, width + orig_freq, dtype=idx_dtype, device=device)[None, None] / orig_freq
    t = torch.arange(0, -new_freq, -1, dtype=dtype, device=device)[:, None, None] / new_freq + idx
    t *= base_freq
    t = t.clamp_(-lowpass_filter_width, lowpass_filter_width)
    if resampling_method == "sinc_interp_hann":
        window = torch.cos(t * math.pi / lowpass_filter_width / 2) ** 2
    else:
        beta = torch.tensor(KAISER_BETA)
        window = torch.i0(beta * torch.sqrt(1 - (t / lowpass_filter_width) ** 2)) / torch.i0(beta)
    t *= math.pi
    kernels = torch.where(t == 0, torch.tensor(1.0).to(t), t.sin() / t)
    kernels *= window * (base_freq / orig_freq)
    return (kernels.to(dtype=torch.float32) if dtype is None else kernels), width


def _apply_sinc_resample_kernel(
    waveform: Tensor, orig_freq: int, new_freq: int, gcd: int, kernel: Tensor, width: int
) -> Tensor:
    if not waveform.is_floating_point():
        raise TypeError(f"Expected floating point type for waveform tensor, but received {waveform.dtype}.")
    orig_freq, new_freq = int(orig_freq) // gcd, int(new_freq) // gcd
    shape = waveform.size()
    waveform = waveform.view(-1, shape[-1])
    num_wavs, length = waveform.shape
    waveform = torch.nn.functional.pad(waveform, (width, width + orig_freq))
    resampled = torch.nn.functional.conv1d(waveform[:, None], kernel, stride=orig_freq)
    resampled = resampled.transpose(1, 2).reshape(num_wavs, -1)
    target_length = torch.ceil(torch.as_tensor(new_freq * length / orig_freq)).long()
    resampled = resampled[..., :target_length]
    return resampled.view(shape[:-1] + resampled.shape[-1:])


def resample(
    waveform: Tensor,
    orig_freq: int,
    new_freq: int,
    lowpass_filter_width: int = 6,
    rolloff: float = 0.99,
    resampling_method: str = "sinc_interp_hann",
) -> Tensor:
    """`torchaudio.functional.resample`: band-limited interpolation of `(..., time)` audio to `new_freq`."""
    if orig_freq <= 0.0 or new_freq <= 0.0:
        raise ValueError("Original frequency and desired frequecy should be positive")
    if orig_freq == new_freq:
        return waveform
    gcd = math.gcd(int(orig_freq), int(new_freq))
    kernel, width = _sinc_resample_kernel(
        orig_freq, new_freq, gcd, lowpass_filter_width, rolloff, resampling_method, waveform.dtype, waveform.device
    )
    return _apply_sinc_resample_kernel(waveform, orig_freq, new_freq, gcd, kernel, width)


class Resample(torch.nn.Module):
    """`torchaudio.transforms.Resample` with its defaults: the kernel is computed once and kept as the buffer
    `kernel`, the name checkpoints store it under (dots.tts's speaker_encoder.safetensors holds it)."""

    kernel: Tensor

    def __init__(
        self,
        orig_freq: int = 16000,
        new_freq: int = 16000,
        resampling_method: str = "sinc_interp_hann",
        lowpass_filter_width: int = 6,
        rolloff: float = 0.99,
    ) -> None:
        super().__init__()
        self.orig_freq = orig_freq
        self.new_freq = new_freq
        self.gcd = math.gcd(int(orig_freq), int(new_freq))
        self.width = 0
        if orig_freq != new_freq:
            kernel, self.width = _sinc_resample_kernel(
                orig_freq, new_freq, self.gcd, lowpass_filter_width, rolloff, resampling_method
            )
            self.register_buffer("kernel", kernel)

    def forward(self, waveform: Tensor) -> Tensor:
        if self.orig_freq == self.new_freq:
            return waveform
        return _apply_sinc_resample_kernel(waveform, self.orig_freq, self.new_freq, self.gcd, self.kernel, self.width)


def _mel(freq: float) -> float:
    return 1127.0 * math.log(1.0 + freq / 700.0)


def _mels(freq: Tensor) -> Tensor:
    return 1127.0 * (1.0 + freq / 700.0).log()


def _mel_banks(num_bins: int, padded_window_size: int, sample_freq: float, low_freq: float) -> Tensor:
    """Kaldi's triangular mel filters up to Nyquist, without VTLN warping: (num_bins, padded_window_size / 2)."""
    nyquist = 0.5 * sample_freq
    fft_bin_width = sample_freq / padded_window_size
    mel_low, mel_high = _mel(low_freq), _mel(nyquist)
    mel_delta = (mel_high - mel_low) / (num_bins + 1)  # num_bins + 1: the bins spread out to the sides
    bins = torch.arange(num_bins).unsqueeze(1)
    left_mel = mel_low + bins * mel_delta
    center_mel = mel_low + (bins + 1.0) * mel_delta
    right_mel = mel_low + (bins + 2.0) * mel_delta
    mel = _mels(fft_bin_width * torch.arange(padded_window_size / 2)).unsqueeze(0)
    up_slope = (mel - left_mel) / (center_mel - left_mel)
    down_slope = (right_mel - mel) / (right_mel - center_mel)
    return torch.max(torch.zeros(1), torch.min(up_slope, down_slope))


def fbank(
    waveform: Tensor, *, num_mel_bins: int = 23, sample_frequency: float = 16000.0, dither: float = 0.0
) -> Tensor:
    """`torchaudio.compliance.kaldi.fbank` of mono `(1, n)` audio with Kaldi's defaults (25 ms Povey windows every
    10 ms, pre-emphasis 0.97, DC offset removed, power spectrum over a power-of-two FFT, mel bins from 20 Hz to
    Nyquist, log energies): `(frames, num_mel_bins)`."""
    device, dtype = waveform.device, waveform.dtype
    epsilon = torch.tensor(torch.finfo(torch.float).eps).to(device=device, dtype=dtype)
    waveform = waveform[0, :]
    window_shift = int(sample_frequency * 10.0 * 0.001)
    window_size = int(sample_frequency * 25.0 * 0.001)
    padded_window_size = 1 if window_size == 0 else 2 ** (window_size - 1).bit_length()
    if not 2 <= window_size <= len(waveform):
        raise ValueError(f"choose a window size {window_size} that is [2, {len(waveform)}]")
    frames = 1 + (len(waveform) - window_size) // window_shift  # snip_edges: only frames that fit
    strides = (window_shift * waveform.stride(0), waveform.stride(0))
    strided = waveform.as_strided((frames, window_size), strides)
    if dither != 0.0:
        strided = strided + torch.randn(strided.shape, device=device, dtype=dtype) * dither
    strided = strided - torch.mean(strided, dim=1).unsqueeze(1)
    offset = torch.nn.functional.pad(strided.unsqueeze(0), (1, 0), mode="replicate").squeeze(0)
    strided = strided - 0.97 * offset[:, :-1]
    window = torch.hann_window(window_size, periodic=False, device=device, dtype=dtype).pow(0.85)  # Povey's
    strided = strided * window.unsqueeze(0)
    if padded_window_size != window_size:
        strided = torch.nn.functional.pad(strided.unsqueeze(0), (0, padded_window_size - window_size)).squeeze(0)
    spectrum = torch.fft.rfft(strided).abs().pow(2.0)
    banks = _mel_banks(num_mel_bins, padded_window_size, sample_frequency, 20.0).to(device=device, dtype=dtype)
    banks = torch.nn.functional.pad(banks, (0, 1), mode="constant", value=0)
    return torch.max(torch.mm(spectrum, banks.T), epsilon).log()
