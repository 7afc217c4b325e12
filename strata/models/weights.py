"""Model weights on the device: one buffer, every tensor at a fixed, aligned offset.

Tensors keep their stored types (quantized blocks are uploaded as they are);
kernels dequantize on the fly. One allocation keeps addresses fixed for the
model's life, as captured graphs require.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _ffi
from ..progress import Progress

ALIGN = 256


@dataclass(frozen=True)
class DeviceTensor:
    buffer: _ffi.Buffer
    offset: int
    dtype: int
    shape: tuple[int, ...]     # [n_out, k] for matrices, [n] for vectors

    @property
    def rows(self) -> int:
        return self.shape[0]

    @property
    def cols(self) -> int:
        return self.shape[-1]


class WeightArena:
    """Uploads named host tensors (raw bytes + dtype + shape) into one device buffer."""

    def __init__(self, ctx: _ffi.Context, tensors: dict, label: str = "loading weights"):
        # tensors: name -> object with .dtype (int), .shape (tuple), .data (np.ndarray of raw bytes)
        offsets, total = {}, 0
        for name, t in tensors.items():
            offsets[name] = total
            total += -(-t.data.nbytes // ALIGN) * ALIGN
        self.nbytes = total
        self.buffer = _ffi.Buffer(ctx, max(total, ALIGN))
        progress = Progress(label, total)
        self.tensors: dict[str, DeviceTensor] = {}
        for name, t in tensors.items():
            data = np.ascontiguousarray(t.data).reshape(-1).view(np.uint8)
            for start in range(0, data.nbytes, 64 << 20):   # chunks keep the progress line moving
                piece = data[start:start + (64 << 20)]
                self.buffer.upload(piece, offsets[name] + start)
                progress.advance(piece.nbytes)
            self.tensors[name] = DeviceTensor(self.buffer, offsets[name], int(t.dtype), tuple(t.shape))
        progress.close()

    def __getitem__(self, name: str) -> DeviceTensor:
        return self.tensors[name]

    def get(self, name: str) -> DeviceTensor | None:
        return self.tensors.get(name)

    def close(self) -> None:
        self.buffer.close()
