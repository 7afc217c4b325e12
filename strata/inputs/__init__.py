"""The input pipeline: chat or completion request -> template -> token ids -> (images) -> EngineInput.

pipeline (chat_input, completion_input) is the entry; prompt renders and
tokenizes, images runs the vision path, engine_input is what comes out.
"""

from .engine_input import EngineInput
from .pipeline import chat_input, completion_input
from .prompt import chat_ids, completion_ids, refuse_images

__all__ = ["EngineInput", "chat_input", "completion_input", "chat_ids", "completion_ids", "refuse_images"]
