"""vLLM's server-wide switches, applied to a request as if it had set them itself, so
the routes and the turn read one field (`--enable-force-include-usage`,
`--return-tokens-as-token-ids`; the profile's keys of the same names)."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

from engine.profiles import Profile
from server.http.schema import StreamOptions

Request = TypeVar("Request", bound=BaseModel)


def with_server_defaults(request: Request, profile: Profile) -> Request:
    """`request` with the served profile's switches filled in where it left them unset:
    a stream gets usage in each chunk, log-probabilities name tokens by id."""
    update: dict = {}
    if profile.return_tokens_as_token_ids and request.return_tokens_as_token_ids is None:
        update["return_tokens_as_token_ids"] = True
    if profile.force_include_usage and request.stream:
        update["stream_options"] = StreamOptions(include_usage=True,
                                                 continuous_usage_stats=True)
    return request.model_copy(update=update) if update else request
