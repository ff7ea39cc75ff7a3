"""The OpenAI-compatible server (engine.server) on the real embedded model, over real HTTP on
127.0.0.1, driven by the official `openai` client and, for the wire format and bad input, by
raw http.client requests. Answers are short (8-32 tokens)."""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

import openai
import pytest
from openai import OpenAI
from server_client import MAX_TOKENS, chat, client, post_json, request, serving

from engine.commands.cli import main as cli_main
from engine.paths import REPO
from engine.server.http import check_bind

PROMPT = "Name three colours of the rainbow."
RAW_PROMPT = "def fibonacci(n):"
LONG_PROMPT = "Write a long story about a lighthouse keeper and a storm, with many details."


def cli_generate(engine, *args: str) -> dict:
    """`hyflash generate --json` in this process, on the already loaded engine (loading is
    covered by test_hyflash_serve_command): the reference the server must match."""
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.setattr("engine.commands.cli.load_engine", lambda _args: engine)
        code = cli_main(
            ["generate", "--json", "--temperature", "0", "--max-tokens", str(MAX_TOKENS), *args]
        )
    assert code == 0
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def reference(engine, runner) -> dict:
    return cli_generate(engine, "--prompt", PROMPT)


def check_stats(h: dict, usage, drafter: str) -> None:
    """The hyflash object agrees with itself and with usage."""
    assert h["drafter"] == drafter
    decodes = h["target_decodes"]
    assert decodes >= 1 and 0 <= h["draft_tokens_accepted"] <= h["draft_tokens_proposed"]
    # tau = committed tokens per decode; committed = output tokens (+1 for an end-of-text)
    committed = h["tau"] * decodes
    assert usage.completion_tokens - 1e-6 <= committed <= usage.completion_tokens + 1 + 1e-6
    assert decodes + h["draft_tokens_accepted"] >= usage.completion_tokens
    assert h["mean_block_size"] == pytest.approx((h["draft_tokens_proposed"] + decodes) / decodes)
    assert h["decode_tokens_per_s"] > 0 and 0 < h["ttft_s"] < 30
    assert h["block_size_mode"] in ("auto", "fixed")


def test_models_and_health(served, model_id):
    url, _ = served
    models = client(url).models.list()
    assert [m.id for m in models.data] == [model_id]
    assert models.data[0].hyflash["n_ctx"] == 4096
    status, _, body = request(url, "GET", "/health")
    assert status == 200 and json.loads(body)["model"] == model_id
    status, _, body = request(url, "GET", f"/v1/models/{model_id}")
    assert status == 200 and json.loads(body)["id"] == model_id


def test_chat_greedy_equals_generate_with_each_drafter(served, model_id, reference):
    url, _ = served
    api = client(url)
    messages = [{"role": "user", "content": PROMPT}]
    draft_model = f"model:{model_id}"  # the embedded model drafting for itself
    for drafter, block in (("none", "auto"), ("hyflash", 4), ("ngram", 3), (draft_model, 4)):
        r = api.chat.completions.create(
            model=model_id,
            messages=messages,
            max_tokens=MAX_TOKENS,
            temperature=0,
            extra_body={"hyflash": {"drafter": drafter, "block_size": block}},
        )
        assert r.choices[0].message.content == reference["text"], drafter
        assert r.usage.completion_tokens == len(reference["tokens"])
        assert r.usage.prompt_tokens == reference["prompt_tokens"]
        assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
        assert (
            r.choices[0].finish_reason
            == {"eos": "stop", "length": "length"}[reference["stop_reason"]]
        )
        check_stats(r.hyflash, r.usage, drafter)
        if drafter == "none":
            assert r.hyflash["draft_tokens_proposed"] == 0 and r.hyflash["tau"] == 1.0
        if drafter in ("hyflash", draft_model):  # a fixed block of 4 always drafts
            assert r.hyflash["draft_tokens_proposed"] > 0 and r.hyflash["block_size"] == 4
            assert r.hyflash["block_size_mode"] == "fixed"
    # max_completion_tokens is the newer name of max_tokens
    r = api.chat.completions.create(
        model=model_id, messages=messages, max_completion_tokens=5, temperature=0
    )
    assert r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length"


def test_streaming_chat_equals_generate_with_stats_in_last_chunk(served, model_id, reference):
    url, _ = served
    api = client(url)
    for include_usage in (False, True):
        chunks = list(
            api.chat.completions.create(
                model=model_id,
                messages=[{"role": "user", "content": PROMPT}],
                max_tokens=MAX_TOKENS,
                temperature=0,
                stream=True,
                stream_options={"include_usage": include_usage},
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == reference["text"]
        assert chunks[0].choices[0].delta.role == "assistant"
        assert len(chunks) >= 4, "the answer should arrive in pieces"
        finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
        assert len(finish) == 1
        last = chunks[-1]
        assert last.hyflash["target_decodes"] >= 1
        assert all(getattr(c, "hyflash", None) is None for c in chunks[:-1])
        if include_usage:
            assert last.choices == [] and last.usage.completion_tokens == len(reference["tokens"])
            check_stats(last.hyflash, last.usage, "ngram")
        else:
            assert last is finish[0] and last.usage is None


def test_sse_wire_format(served, model_id):
    url, _ = served
    body = {
        "model": model_id,
        "messages": [{"role": "user", "content": "Say hi."}],
        "max_tokens": 8,
        "stream": True,
    }
    status, head, data = request(
        url,
        "POST",
        "/v1/chat/completions",
        json.dumps(body).encode(),
        {"content-type": "application/json"},
    )
    assert status == 200 and head["content-type"].startswith("text/event-stream")
    events = [e for e in data.decode().split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    payloads = [json.loads(e[6:]) for e in events[:-1]]
    assert {p["object"] for p in payloads} == {"chat.completion.chunk"}
    assert len({p["id"] for p in payloads}) == 1 and "hyflash" in payloads[-1]


def test_completions_equal_generate_raw(served, model_id, engine):
    url, _ = served
    want = cli_generate(engine, "--prompt", RAW_PROMPT, "--raw")
    api = client(url)
    r = api.completions.create(
        model=model_id, prompt=RAW_PROMPT, max_tokens=MAX_TOKENS, temperature=0
    )
    assert r.object == "text_completion" and r.choices[0].text == want["text"]
    assert r.usage.completion_tokens == len(want["tokens"])
    assert r.usage.prompt_tokens == want["prompt_tokens"]
    check_stats(r.hyflash, r.usage, "ngram")
    streamed = list(
        api.completions.create(
            model=model_id, prompt=[RAW_PROMPT], max_tokens=MAX_TOKENS, temperature=0, stream=True
        )
    )
    assert "".join(c.choices[0].text for c in streamed if c.choices) == want["text"]
    assert streamed[-1].hyflash["target_decodes"] >= 1
    # OpenAI's default for /v1/completions is 16 tokens
    r = api.completions.create(model=model_id, prompt=RAW_PROMPT, temperature=0)
    assert r.usage.completion_tokens == 16


BAD_CHAT = {
    "malformed JSON": (b'{"model": "x", "messages": [', 400, "invalid_json"),
    "not an object": (b"[1, 2]", 400, "invalid_type"),
    "empty body": (b"", 400, "invalid_json"),
    "missing messages": ({"model": "M"}, 400, "missing_required_parameter"),
    "missing model": ({"messages": [{"role": "user", "content": "Hi"}]}, 400, None),
    "max_tokens as text": (chat("M", max_tokens="8"), 400, "invalid_type"),
    "stream as text": (chat("M", stream="yes"), 400, "invalid_type"),
    "content as number": (
        {"model": "M", "messages": [{"role": "user", "content": 5}]},
        400,
        "invalid_type",
    ),
    "no messages": ({"model": "M", "messages": []}, 400, "invalid_value"),
    "max_tokens 0": (chat("M", max_tokens=0), 400, "invalid_value"),
    "temperature 5": (chat("M", temperature=5), 400, "invalid_value"),
    "temperature -1": (chat("M", temperature=-1), 400, "invalid_value"),
    "top_p 5": (chat("M", top_p=5), 400, "invalid_value"),
    "top_p 0": (chat("M", top_p=0), 400, "invalid_value"),
    "five stop strings": (chat("M", stop=["a", "b", "c", "d", "e"]), 400, "invalid_value"),
    "unknown role": (
        {"model": "M", "messages": [{"role": "wizard", "content": "Hi"}]},
        400,
        "invalid_value",
    ),
    "unknown model": (chat("gpt-4o"), 404, "model_not_found"),
    "n = 2": (chat("M", n=2), 400, "unsupported_parameter"),
    "tools": (
        chat("M", tools=[{"type": "function", "function": {"name": "f"}}]),
        400,
        "unsupported_parameter",
    ),
    "image": (
        {
            "model": "M",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
                    ],
                }
            ],
        },
        400,
        "unsupported_parameter",
    ),
    "tool message": (
        {"model": "M", "messages": [{"role": "tool", "content": "42", "tool_call_id": "1"}]},
        400,
        "unsupported_parameter",
    ),
    "logprobs": (chat("M", logprobs=True), 400, "unsupported_parameter"),
    "JSON mode": (chat("M", response_format={"type": "json_object"}), 400, "unsupported_parameter"),
    "block size 0": (chat("M", hyflash={"block_size": 0}), 400, "invalid_block_size"),
    "block size 99": (chat("M", hyflash={"block_size": 99}), 400, "invalid_block_size"),
    "block size text": (chat("M", hyflash={"block_size": "big"}), 400, "invalid_block_size"),
    "drafter path": (chat("M", hyflash={"drafter": "/etc/passwd"}), 400, "invalid_drafter"),
    "draft model path": (
        chat("M", hyflash={"drafter": "model:/etc/passwd"}),
        400,
        "invalid_drafter",
    ),
    # a catalog model of another vocabulary: refused by the pairing check, in OpenAI's shape
    "mismatched draft model": (
        chat("M", hyflash={"drafter": "model:qwen2.5-coder-0.5b-instruct"}),
        400,
        "invalid_drafter",
    ),
    "unknown hyflash field": (chat("M", hyflash={"speed": "max"}), 400, None),
    "prompt longer than the context": (
        {"model": "M", "messages": [{"role": "user", "content": "lighthouse " * 5000}]},
        400,
        "context_length_exceeded",
    ),
}


@pytest.mark.parametrize("case", list(BAD_CHAT), ids=list(BAD_CHAT))
def test_bad_chat_requests_get_openai_errors(served, model_id, case):
    url, _ = served
    body, status, code = BAD_CHAT[case]
    if isinstance(body, dict) and body.get("model") == "M":
        body = {**body, "model": model_id}
    got, _, reply = post_json(url, "/v1/chat/completions", body)
    assert got == status, reply
    error = reply["error"]
    assert set(error) >= {"message", "type", "code"} and error["message"]
    assert error["type"] == "invalid_request_error"
    if code:
        assert error["code"] == code, error


def test_bad_completions_and_paths(served, model_id):
    url, _ = served
    cases = [
        ({"model": model_id, "prompt": ["a", "b"]}, 400, "unsupported_parameter"),
        ({"model": model_id, "prompt": [1, 2, 3]}, 400, "invalid_type"),
        ({"model": model_id, "prompt": "x", "echo": True}, 400, "unsupported_parameter"),
        ({"model": model_id, "prompt": ""}, 400, "invalid_value"),
        ({"model": "nope", "prompt": "x"}, 404, "model_not_found"),
    ]
    for body, status, code in cases:
        got, _, reply = post_json(url, "/v1/completions", body)
        assert (got, reply["error"]["code"]) == (status, code), body
    status, _, body = request(url, "GET", "/v1/files")
    assert status == 404 and json.loads(body)["error"]["code"] == "not_found"
    status, _, body = request(url, "GET", "/v1/chat/completions")
    assert status == 405 and "error" in json.loads(body)
    # the service still answers after all that
    assert client(url).models.list().data


def test_api_key_is_required_and_checked(runner, model_id):
    with serving(runner, api_key="s3cret-key") as (url, logs):
        for method, path in (("GET", "/health"), ("GET", "/v1/models"), ("GET", "/nope")):
            for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "s3cret-key"}):
                status, head, body = request(url, method, path, headers=headers)
                assert status == 401, (path, headers)
                assert json.loads(body)["error"]["code"] == "invalid_api_key"
                assert head["www-authenticate"] == "Bearer"
        status, _, _ = post_json(url, "/v1/chat/completions", chat(model_id))
        assert status == 401
        with pytest.raises(openai.AuthenticationError):
            client(url, "wrong").models.list()
        api = client(url, "s3cret-key")
        assert [m.id for m in api.models.list().data] == [model_id]
        r = api.chat.completions.create(
            model=model_id, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
        )
        assert r.usage.completion_tokens >= 1
        assert [e.status for e in logs].count(401) == 11


def test_binding_beyond_loopback_needs_a_key():
    for host in ("127.0.0.1", "localhost", "::1"):
        check_bind(host, None)
    for host in ("0.0.0.0", "192.168.1.10", "::"):
        with pytest.raises(ValueError, match="api-key"):
            check_bind(host, None)
        check_bind(host, "key")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli_main(["serve", "--host", "0.0.0.0", "--port", "0"]) == 2
    assert "--api-key" in err.getvalue()


def test_request_body_over_the_limit_is_refused(runner, model_id):
    with serving(runner, max_body_bytes=2000) as (url, _):
        big = chat(model_id, messages=[{"role": "user", "content": "x" * 5000}])
        status, _, reply = post_json(url, "/v1/chat/completions", big)
        assert status == 413 and reply["error"]["code"] == "request_too_large"
        # without a Content-Length (chunked), the limit holds while reading
        parts = urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        chunks = (json.dumps(big).encode()[i : i + 500] for i in range(0, 6000, 500))
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=chunks,
            headers={"content-type": "application/json"},
            encode_chunked=True,
        )
        resp = conn.getresponse()
        assert resp.status == 413
        assert json.loads(resp.read())["error"]["code"] == "request_too_large"
        conn.close()
        status, _, reply = post_json(url, "/v1/chat/completions", chat(model_id, max_tokens=2))
        assert status == 200 and reply["usage"]["completion_tokens"] >= 1


def test_cors_is_off_unless_an_origin_is_allowed(runner, served):
    preflight = {
        "origin": "http://example.test",
        "access-control-request-method": "POST",
        "access-control-request-headers": "content-type",
    }
    url, _ = served
    _, head, _ = request(url, "OPTIONS", "/v1/chat/completions", headers=preflight)
    assert "access-control-allow-origin" not in head
    _, head, _ = request(url, "GET", "/v1/models", headers={"origin": "http://example.test"})
    assert "access-control-allow-origin" not in head
    with serving(runner, cors_origins=("http://example.test",)) as (cors_url, _):
        status, head, _ = request(cors_url, "OPTIONS", "/v1/chat/completions", headers=preflight)
        assert status == 200 and head["access-control-allow-origin"] == "http://example.test"
        _, head, _ = request(cors_url, "GET", "/v1/models", headers={"origin": "http://evil.test"})
        assert "access-control-allow-origin" not in head


def test_twenty_concurrent_streams_each_finish_or_get_503(served, model_id):
    url, logs = served
    api = client(url)
    n = 20
    results: list = [None] * n
    start = threading.Barrier(n)

    def one(i: int) -> None:
        start.wait()
        try:
            text, finish = "", None
            for c in api.chat.completions.create(
                model=model_id,
                messages=[{"role": "user", "content": f"Count to {i + 3}."}],
                max_tokens=10,
                temperature=0,
                stream=True,
            ):
                if c.choices:
                    text += c.choices[0].delta.content or ""
                    finish = c.choices[0].finish_reason or finish
            results[i] = ("ok", text, finish, c.hyflash)
        except openai.APIStatusError as exc:
            results[i] = (exc.status_code, exc.response.headers.get("retry-after"), exc.code)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 240
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a client hung"
    ok = [r for r in results if r[0] == "ok"]
    busy = [r for r in results if r[0] == 503]
    assert len(ok) + len(busy) == n, results
    for _, text, finish, stats in ok:
        assert text and finish in ("stop", "length") and stats["target_decodes"] >= 1
    for _, retry_after, code in busy:
        assert code == "server_busy" and int(retry_after) >= 1
    # at most 16 wait behind the one running: 17 answers at least
    assert len(ok) >= 17, results
    status, _, body = request(url, "GET", "/health")
    assert status == 200 and json.loads(body)["waiting"] == 0
    after = client(url).chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
    )
    assert after.usage.completion_tokens >= 1


KILLED_CLIENT = """
import sys, time
from openai import OpenAI
api = OpenAI(base_url=sys.argv[1], api_key="x", max_retries=0)
for c in api.chat.completions.create(model=sys.argv[2], stream=True, max_tokens=2000,
        temperature=0, messages=[{"role": "user", "content": sys.argv[3]}]):
    if c.choices and c.choices[0].delta.content:
        print("streaming", flush=True)
        time.sleep(600)  # holds the connection open until killed
"""


def test_a_killed_client_frees_the_engine(served, model_id):
    url, logs = served
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_CLIENT, f"{url}/v1", model_id, LONG_PROMPT],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "streaming"
        # a client that gives up while it waits behind the stream leaves the queue at once
        with pytest.raises(openai.APITimeoutError):
            OpenAI(
                base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=1.0
            ).completions.create(model=model_id, prompt="Hello", max_tokens=8)
        time.sleep(0.5)
        assert json.loads(request(url, "GET", "/health")[2])["waiting"] == 0
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    t0 = time.monotonic()
    ttft = None
    for c in client(url).chat.completions.create(
        model=model_id,
        messages=[{"role": "user", "content": "Say hi."}],
        max_tokens=8,
        temperature=0,
        stream=True,
    ):
        if ttft is None and c.choices and c.choices[0].delta.content:
            ttft = time.monotonic() - t0
    assert ttft is not None and ttft < 2.0, ttft
    killed = [e for e in logs if e.outcome == "cancelled" and e.path == "/v1/chat/completions"]
    assert killed and killed[-1].status == 200
    gave_up = [e for e in logs if e.path == "/v1/completions" and e.status == 499]
    assert gave_up, [(e.path, e.status, e.outcome) for e in logs[-5:]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_hyflash_serve_command(model_id):
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.commands.cli", "serve", "--port", str(port)]
        + ["--drafter", "none", "--threads", "1", "--n-ctx", "1024", "--block-size", "1"],
        cwd=REPO,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "Serving" in line:
                break
        assert f"http://127.0.0.1:{port}/v1" in lines[-1], lines
        r = client(f"http://127.0.0.1:{port}").chat.completions.create(
            model=model_id, messages=[{"role": "user", "content": "Hi"}], max_tokens=6
        )
        assert r.hyflash["drafter"] == "none" and r.hyflash["block_size"] == 1
        assert r.usage.completion_tokens >= 1
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, rest = proc.communicate(timeout=30)
        finally:
            proc.kill()
    assert proc.returncode == 0, rest
    with socket.create_server(("127.0.0.1", port)):  # the port is free again
        pass
