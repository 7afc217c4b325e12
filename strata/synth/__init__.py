"""`strata synth`: random-weight llama GGUFs of benchmark shapes (the command lives in synth.command).

shapes (the presets and overrides) -> plan (each tensor's type) -> blocks (random rows in a
type's block layout) -> stream (seeded chunks written in order) -> writer (the GGUF file),
with tokenizer copying SmolLM2's vocabulary in.
"""

from .command import configure_parser, describe_shapes, main, run

__all__ = ["configure_parser", "describe_shapes", "main", "run"]
