"""A tiny random Qwen2.5-VL checkpoint, written by transformers, for the vision-model tests.

Few layers and small widths, but the real vocabulary size (151936) and the
real special-token ids: a byte-level BPE tokenizer.json whose special tokens
sit at Qwen's ids (every other id up to the vocabulary size is a filler
token, so anything a random model samples decodes), a chat template that
writes <|vision_start|><|image_pad|><|vision_end|> for an image part, and a
preprocessor_config.json with a small max_pixels so images stay a few dozen
patches. The vision tower has window attention (112-pixel windows) and one
full-attention block.
"""

from __future__ import annotations

import json
from pathlib import Path

VOCAB = 151936
SPECIAL_TOKENS = {
    "<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<|object_ref_start|>": 151646,
    "<|object_ref_end|>": 151647, "<|box_start|>": 151648, "<|box_end|>": 151649, "<|quad_start|>": 151650,
    "<|quad_end|>": 151651, "<|vision_start|>": 151652, "<|vision_end|>": 151653, "<|vision_pad|>": 151654,
    "<|image_pad|>": 151655, "<|video_pad|>": 151656,
}
IMAGE_PAD, VISION_START, VISION_END = 151655, 151652, 151653
MERGES = ["th", "he", "in", "er", "an", "re", "on", "at", "en", "nd", "is", "or"]

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

PREPROCESSOR = {
    "min_pixels": 56 * 56, "max_pixels": 28 * 28 * 64, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
}


def text_config(hidden: int = 64) -> dict:
    return dict(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1000000.0})


def vision_config(out_hidden: int = 64) -> dict:
    return dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=out_hidden,
                fullatt_block_indexes=[1], window_size=112, patch_size=14, spatial_merge_size=2,
                temporal_patch_size=2)


def write_checkpoint(directory: Path, *, dtype: str = "float32", tied: bool = False, seed: int = 0) -> Path:
    """Writes the model (weights in `dtype`), tokenizer, template and preprocessor config; returns directory."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    config = Qwen2_5_VLConfig(text_config=text_config(), vision_config=vision_config(), tie_word_embeddings=tied,
                              image_token_id=IMAGE_PAD, vision_start_token_id=VISION_START,
                              vision_end_token_id=VISION_END)
    config.text_config.initializer_range = 0.05
    config.vision_config.initializer_range = 0.05
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    model.to(getattr(torch, dtype)).save_pretrained(directory)
    write_tokenizer(directory)
    (directory / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR))
    return directory


def write_tokenizer(directory: Path) -> None:
    byte_chars = _bytes_to_unicode()
    vocab = {byte_chars[b]: b for b in range(256)}
    merges = []
    for pair in MERGES:
        a, b = byte_chars[ord(pair[0])], byte_chars[ord(pair[1])]
        vocab[a + b] = len(vocab)
        merges.append([a, b])
    for token_id in range(len(vocab), VOCAB):       # fillers: every id a random model samples decodes
        vocab.setdefault(f"<filler{token_id}>", token_id)
    vocab = {t: i for t, i in vocab.items() if i not in SPECIAL_TOKENS.values()}
    vocab.update(SPECIAL_TOKENS)
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for t, i in SPECIAL_TOKENS.items()]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    spec = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": byte_level, "post_processor": None, "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": merges}}
    (directory / "tokenizer.json").write_text(json.dumps(spec))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": CHAT_TEMPLATE, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "bos_token": None, "model_max_length": 4096}))


def _bytes_to_unicode() -> dict[int, str]:
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars
