"""The one refusal the Messages and Responses wires give a field of the request: a 400
`invalid_request_error` that names the field (`param`) and says why, its message led by
the field's name as the chat route's are."""

from __future__ import annotations

from server.http.errors import APIError


def bad_param(param: str, why: str, code: str = "invalid_value") -> APIError:
    """`param: why` as a 400 naming `param` (`code` defaults to `invalid_value`)."""
    return APIError(400, f"{param}: {why}", code=code, param=param)
