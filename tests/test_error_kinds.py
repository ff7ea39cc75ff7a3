"""ErrorEvent.kind (engine.events.ErrorKind): every kind the code uses is listed there, and
the server answers each with its own status."""

from __future__ import annotations

import ast

from engine.events import ERROR_KINDS, ErrorEvent
from engine.paths import REPO
from engine.server.protocol import engine_error


def _kinds_used() -> set[str]:
    """Constant kinds given to ErrorEvent(...) and to the app worker's error signal."""
    used = set()
    for path in [*REPO.joinpath("engine").rglob("*.py"), *REPO.joinpath("app").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Name) and func.id == "ErrorEvent":
                kinds = [k.value for k in node.keywords if k.arg == "kind"]
                kinds += node.args[1:2]
            elif (
                isinstance(func, ast.Attribute)
                and func.attr == "emit"
                and isinstance(func.value, ast.Attribute)
                and func.value.attr == "error"
                and len(node.args) == 3
            ):
                kinds = [node.args[2]]
            else:
                continue
            used |= {k.value for k in kinds if isinstance(k, ast.Constant)}
    return used


def test_every_kind_used_is_listed():
    used = _kinds_used()
    assert {"input", "context", "drafter", "unavailable", "internal", "model"} <= used
    assert used <= set(ERROR_KINDS), used - set(ERROR_KINDS)
    assert ErrorEvent("x").kind in ERROR_KINDS  # the default


def test_the_server_answers_each_kind_with_its_status():
    status = {kind: engine_error(ErrorEvent("x", kind)).status for kind in ERROR_KINDS}
    assert status == {
        "input": 400,
        "context": 400,
        "drafter": 400,
        "unavailable": 503,
        "internal": 500,
        "error": 500,
        "model": 500,
    }
