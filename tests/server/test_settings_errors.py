"""The server's side of the one settings contract (tests/test_generation_settings.py): a
setting no generation can use is a 400 in OpenAI's shape with GenerationSettings' own words."""

from __future__ import annotations

import pytest
from server_client import chat, post_json

from engine.events import GenerationSettings

SERVER_BAD = {
    "block size 0": ({"hyflash": {"block_size": 0}}, "hyflash.block_size", {"block_size": 0}),
    "block size '4'": ({"hyflash": {"block_size": "4"}}, "hyflash.block_size", {"block_size": "4"}),
    "temperature -1": ({"temperature": -1}, "temperature", {"temperature": -1.0}),
    "top_p 5": ({"top_p": 5}, "top_p", {"top_p": 5.0}),
    "max_tokens 0": ({"max_tokens": 0}, "max_tokens", {"max_tokens": 0}),
}


@pytest.mark.parametrize("case", list(SERVER_BAD), ids=list(SERVER_BAD))
def test_server_answers_400_with_the_settings_message(request, case):
    url, _ = request.getfixturevalue("served")
    extra, param, setting = SERVER_BAD[case]
    body = chat(request.getfixturevalue("model_id"), **extra)
    status, _, reply = post_json(url, "/v1/chat/completions", body)
    assert status == 400, reply
    error = reply["error"]
    code = "invalid_block_size" if param == "hyflash.block_size" else "invalid_value"
    assert (error["code"], error["param"], error["type"]) == (code, param, "invalid_request_error")
    with pytest.raises(ValueError) as caught:
        GenerationSettings(**setting)
    assert error["message"] == f"{param}: {caught.value}"  # the same words, not a second check
