"""The Strata SDK: sync and async HTTP clients for a `strata serve` server (httpx only, no native code).

    from strata.client import Client

clients holds Client and AsyncClient; types the typed results, the exceptions and how server JSON
becomes them.
"""

from .clients import AsyncClient, Client
from .types import (APIConnectionError, APIError, APITimeoutError, Completion, CompletionChunk, Model,
                    StrataClientError, TokenLogprob, Usage)

__all__ = ["Client", "AsyncClient", "Completion", "CompletionChunk", "Usage", "TokenLogprob", "Model",
           "StrataClientError", "APIError", "APIConnectionError", "APITimeoutError"]
