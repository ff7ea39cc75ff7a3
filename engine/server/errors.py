"""Errors in OpenAI's shape: {"error": {"message", "type", "code", "param"}}."""

from __future__ import annotations

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

# HTTP status -> OpenAI's error type
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    500: "server_error",
    503: "server_error",
}


class APIError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.param, self.headers = param, headers


def error_body(status: int, code: str, message: str, param: str | None = None) -> dict:
    return {
        "error": {
            "message": message,
            "type": ERROR_TYPES.get(status, "invalid_request_error"),
            "code": code,
            "param": param,
        }
    }


def error_response(exc: APIError) -> JSONResponse:
    return JSONResponse(
        error_body(exc.status, exc.code, exc.message, exc.param),
        status_code=exc.status,
        headers=exc.headers,
    )


def _validation_code(kind: str) -> str:
    if kind == "json_invalid":
        return "invalid_json"
    if kind == "missing":
        return "missing_required_parameter"
    if kind.endswith("_type") or kind in ("model_attributes_type", "union_tag_invalid"):
        return "invalid_type"
    return "invalid_value"


async def _on_api_error(_request: Request, exc: APIError) -> JSONResponse:
    return error_response(exc)


async def _on_validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
    first = exc.errors()[0]
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    if first.get("type") == "json_invalid" or (not loc and first.get("type") == "missing"):
        loc = []  # a JSON error's location is a character offset, not a parameter
        code = "invalid_json"
        message = f"the request body must be a JSON object ({first.get('msg', 'invalid')})"
    else:
        code = _validation_code(first.get("type", ""))
        where = ".".join(loc)
        message = f"{where}: {first.get('msg', 'invalid')}" if where else first.get("msg", "")
    return error_response(APIError(400, code, message, ".".join(loc) or None))


async def _on_http_error(_request: Request, exc: HTTPException) -> JSONResponse:
    codes = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}
    return error_response(
        APIError(exc.status_code, codes.get(exc.status_code, "http_error"), str(exc.detail))
    )


async def _on_crash(_request: Request, exc: Exception) -> JSONResponse:
    return error_response(APIError(500, "internal_error", f"{type(exc).__name__}: {exc}"))


EXCEPTION_HANDLERS = {
    APIError: _on_api_error,
    RequestValidationError: _on_validation_error,
    HTTPException: _on_http_error,
    Exception: _on_crash,
}
