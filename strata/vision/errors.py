"""The exceptions of the vision package.

Every one of them means "this request's image or vision record is not
acceptable": the server answers it with HTTP 400 in the OpenAI error shape,
using the message as written (each says what was wrong and what is allowed),
and keeps serving. `code` is the machine-readable reason for the error body.
"""

from __future__ import annotations


class VisionError(ValueError):
    """Base of the vision errors; `status` is the HTTP status to answer with, `param` the request field."""

    status = 400

    def __init__(self, message: str, code: str = "invalid_image", param: str = "messages") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param


class MediaError(VisionError):
    """An image_url could not be turned into an image within the limits."""


class PreprocessError(VisionError):
    """An image (or a preprocessor configuration) the Qwen2-VL preprocessing can't take."""


class VisionRecordError(VisionError):
    """A vision record (embeddings, grids, positions, tokens) failed validation."""

    def __init__(self, message: str, code: str = "invalid_vision_record") -> None:
        super().__init__(message, code)
