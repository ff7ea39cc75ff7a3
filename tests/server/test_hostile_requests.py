"""What a web page or a careless client can send the local server: a Host that is not ours
(DNS rebinding), keys where `ps` shows them, a seed of -1, an answer longer than the context,
stop strings by the hundred or by the megabyte. Real HTTP on loopback, the real model."""

from __future__ import annotations

import contextlib
import io

import pytest
from server_client import chat, post_json, request, serving

from engine.commands.cli import build_parser
from engine.commands.cli import main as cli_main
from engine.commands.serve import api_key_of
from engine.server.middleware import host_name


@pytest.mark.parametrize(
    "header, name",
    [
        ("localhost:8000", "localhost"),
        ("[::1]:8000", "::1"),
        ("127.0.0.1", "127.0.0.1"),
        ("Attacker.Example:80", "attacker.example"),
        ("", ""),
    ],
)
def test_host_names_without_ports(header, name):
    assert host_name(header.encode()) == name


def test_a_request_for_another_host_name_is_refused(runner, model_id):
    with serving(runner, allowed_hosts=("mybox.lan",)) as (url, _):
        port = url.rsplit(":", 1)[1]
        for host in ("attacker.example", f"attacker.example:{port}", "127.0.0.1.nip.io"):
            status, _, body = request(url, "GET", "/health", headers={"host": host})
            assert status == 403 and b"host_not_allowed" in body, host
            status, _, reply = post_json(
                url, "/v1/chat/completions", chat(model_id), headers={"host": host}
            )
            assert status == 403 and reply["error"]["code"] == "host_not_allowed"
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", "mybox.lan", f"[::1]:{port}"):
            assert request(url, "GET", "/health", headers={"host": host})[0] == 200, host


def test_bound_to_every_address_any_name_may_ask_but_only_with_the_key(runner):
    with serving(runner, host="0.0.0.0", api_key="k") as (url, _):
        status, _, _ = request(url, "GET", "/health", headers={"host": "mybox.lan"})
        assert status == 401  # the key keeps pages out where names cannot be known
        headers = {"host": "mybox.lan", "authorization": "Bearer k"}
        assert request(url, "GET", "/health", headers=headers)[0] == 200


def test_the_key_comes_from_a_file_or_the_environment(tmp_path, monkeypatch):
    key_file = tmp_path / "key"
    key_file.write_text("from-a-file\n", encoding="utf-8")
    monkeypatch.setenv("HYFLASH_API_KEY", "from-the-environment")

    def key(*argv: str) -> str | None:
        return api_key_of(build_parser().parse_args(["serve", *argv]))

    assert key("--api-key-file", str(key_file)) == "from-a-file"
    assert key() == "from-the-environment"
    assert key("--api-key", "given") == "given"
    (tmp_path / "empty").write_text("\n", encoding="utf-8")
    for bad in ("empty", "missing"):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = cli_main(["serve", "--port", "0", "--api-key-file", str(tmp_path / bad)])
        assert code == 2 and "API key file" in err.getvalue()
    monkeypatch.delenv("HYFLASH_API_KEY")
    assert key() is None


def test_seed_minus_one_means_a_random_seed(served, model_id):
    url, _ = served
    status, _, reply = post_json(
        url, "/v1/chat/completions", chat(model_id, seed=-1, temperature=0.7)
    )
    assert status == 200, reply
    assert reply["choices"][0]["message"]["content"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_an_answer_longer_than_the_context_is_a_400(served, model_id, path):
    url, _ = served
    body = chat(model_id, max_tokens=10**6)
    if path == "/v1/completions":
        body = {"model": model_id, "prompt": "Hi", "max_tokens": 10**6}
    status, _, reply = post_json(url, path, body)
    assert status == 400, reply
    error = reply["error"]
    assert (error["code"], error["param"]) == ("context_length_exceeded", "max_tokens")
    assert "1000000 tokens do not fit in the model's context of 4096" in error["message"]


@pytest.mark.parametrize(
    "stop", [[f"stop{i}" for i in range(100)], ["x" * 2**20]], ids=["100 strings", "1 MB"]
)
def test_stop_strings_are_capped_in_number_and_length(served, model_id, stop):
    url, _ = served
    status, _, reply = post_json(url, "/v1/chat/completions", chat(model_id, stop=stop))
    assert status == 400 and reply["error"]["param"] == "stop", reply
