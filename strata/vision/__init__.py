"""Image support: image_url -> PIL image (media), -> patch rows (preprocess),
encoder output -> validated vision record (records), M-RoPE positions (mrope).

Pure Python and NumPy; the encoder itself runs in libstrata. See docs/vision.md.
"""
