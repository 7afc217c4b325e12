"""IQ3_S's codebook in libstrata (libstrata/src/core/iq3s_grid.h, shared by the
CPU and CUDA decoders) against the gguf package's IQ3_S grid, entry by entry.

The float64 matmul and embedding tests (test_matmul.py, test_elementwise.py)
already compare IQ3_S rows against gguf's dequantizer on random blocks; this
test pins the table itself, so a wrong entry is named directly, even one that
random blocks of a test's size happen not to draw.
"""

import re
from pathlib import Path

import numpy as np
from gguf.quants import IQ3_S

GRID_HEADER = Path(__file__).resolve().parents[2] / "libstrata" / "src" / "core" / "iq3s_grid.h"


def test_iq3s_grid_matches_gguf():
    text = GRID_HEADER.read_text()
    body = text[text.index("#define STRATA_IQ3S_GRID_WORDS"):]
    words = np.array([int(w, 16) for w in re.findall(r"0x[0-9a-fA-F]{8}", body)], dtype=np.uint64)
    assert words.shape == (512,)
    ours = np.stack([(words >> np.uint64(8 * t)) & np.uint64(255) for t in range(4)], axis=1)
    IQ3_S.init_grid()
    want = np.asarray(IQ3_S.grid, dtype=np.float64).reshape(512, 4)
    mismatched = np.nonzero((ours.astype(np.float64) != want).any(axis=1))[0]
    assert mismatched.size == 0, f"grid entries differ from gguf's IQ3_S: {mismatched[:10].tolist()}"
