"""vLLM's error object for the sidecar's OpenAI routes.

An :class:`APIError` carries the HTTP status and ``body()`` is vLLM's error object
(``{"error": {"message", "type", "param", "code"}}``, ``code`` the HTTP status).  The
constructors below give the three kinds of 400 the request parsers raise: a body that is not
the schema, a value out of range, an option the sidecar does not implement.
"""

from __future__ import annotations


# vLLM's error ``type`` per status (its ErrorInfo: message, type, param, code = the status)
ERROR_TYPES = {400: "BadRequestError", 401: "Unauthorized", 404: "NotFoundError",
               405: "MethodNotAllowed", 408: "RequestTimeout", 413: "RequestEntityTooLarge",
               414: "RequestURITooLong", 429: "TooManyRequests",
               431: "RequestHeaderFieldsTooLarge", 500: "InternalServerError",
               501: "NotImplemented", 503: "ServiceUnavailable"}


class APIError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.headers = headers or {}
        self.type = ERROR_TYPES.get(status, "InternalServerError")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.status}}


def schema_error(param: str, what: str) -> APIError:
    return APIError(400, f"{param}: {what}", param=param)


def value_error(param: str, what: str) -> APIError:
    return APIError(400, what, param=param)


def unsupported(param: str, what: str | None = None) -> APIError:
    return APIError(400, f"{what or param} is not currently supported", param=param)
