"""OpenAI's Predicted Outputs on the server (engine.drafters.prediction behind it), through the
official client: the same answer, drafted from the prediction, and usage that counts it."""

from __future__ import annotations

import pytest
from server_client import chat, client, post_json


def test_a_prediction_drafts_the_answer_and_usage_counts_it(served, model_id):
    """OpenAI's Predicted Outputs through the official client: the same answer as without
    the prediction, stream and whole; usage says how much of the prediction was used."""
    url, _ = served
    api = client(url)
    ask = {
        "model": model_id,
        "messages": [{"role": "user", "content": "Name three colours of the rainbow."}],
        "max_tokens": 24,
        "temperature": 0,
    }
    plain = api.chat.completions.create(**ask)
    text = plain.choices[0].message.content
    assert plain.usage.completion_tokens_details is None  # no prediction, no counts
    predicted = api.chat.completions.create(**ask, prediction={"type": "content", "content": text})
    assert predicted.choices[0].message.content == text
    details = predicted.usage.completion_tokens_details
    assert details.accepted_prediction_tokens >= predicted.usage.completion_tokens - 2
    assert details.rejected_prediction_tokens <= 2
    chunks = list(
        api.chat.completions.create(
            **ask,
            prediction={"type": "content", "content": [{"type": "text", "text": text}]},
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].usage.completion_tokens_details.accepted_prediction_tokens > 0


@pytest.mark.parametrize(
    "prediction, param",
    [
        ({"type": "file", "content": "x"}, "prediction.type"),
        ({"type": "content", "content": [{"type": "image_url"}]}, "prediction.content"),
    ],
)
def test_a_prediction_of_another_shape_is_a_400(served, model_id, prediction, param):
    url, _ = served
    status, _, reply = post_json(url, "/v1/chat/completions", chat(model_id, prediction=prediction))
    assert status == 400 and reply["error"]["param"] == param, reply
