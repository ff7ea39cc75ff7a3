"""The one options table (engine.options): every surface's defaults and ranges come from it,
and a value out of range is refused with the table's one line on each surface."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields

import pytest

from app.settings import AppSettings, validate
from engine.commands.cli import build_parser
from engine.commands.engine_args import generation_settings
from engine.events import EngineError, GenerationSettings, SettingError
from engine.options import (
    COMPLETIONS_MAX_TOKENS,
    DEFAULT_DRAFTER,
    EXTRA_BUFTS,
    MAX_BLOCK_SIZE,
    NOT_OFFERED,
    OPTION,
    OPTIONS,
    VERIFY_MODES,
    defaults,
)
from engine.paths import REPO
from engine.server.errors import APIError
from engine.server.protocol import ChatRequest, CompletionRequest
from engine.server.protocol import generation_settings as request_settings

# One value outside each option's range (what GenerationSettings refuses).
OUT_OF_RANGE = {
    "block_size": MAX_BLOCK_SIZE + 1,
    "temperature": -0.5,
    "top_p": 1.5,
    "top_k": -2,
    "max_tokens": 0,
    "seed": 2.5,
    "stop": "END",
}


def test_every_generation_setting_has_one_row():
    table = {o.name for o in OPTIONS}
    settings = {f.name for f in fields(GenerationSettings)} - {"ignore_eos"}  # tests only
    assert table == settings and set(OUT_OF_RANGE) == table


def test_engine_defaults_are_the_table_s():
    made = GenerationSettings()
    for name, value in defaults("engine").items():
        assert getattr(made, name) == (list(value) if name == "stop" else value), name


def test_cli_defaults_types_and_help_are_the_table_s():
    args = build_parser().parse_args(["generate", "--prompt", "Hi"])
    for option in OPTIONS:
        if option.type is not None:
            assert getattr(args, option.name) == option.default, option.name
    assert generation_settings(args) == GenerationSettings()
    typed = build_parser().parse_args(
        ["generate", "--prompt", "Hi", "--block-size", "4", "--top-k", "7", "--top-p", "0.5"]
    )
    assert (typed.block_size, typed.top_k, typed.top_p) == (4, 7, 0.5)
    help_text = subprocess.run(
        [sys.executable, "-m", "engine.commands.cli", "generate", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    ).stdout
    flat = " ".join(help_text.split())  # argparse wraps lines
    for option in OPTIONS:
        if option.type is not None:
            assert option.flag in flat and option.range in flat, option.name


def test_serve_block_size_default_is_the_table_s():
    args = build_parser().parse_args(["serve"])
    assert args.block_size == OPTION["block_size"].server


def test_server_request_defaults_are_the_table_s():
    chat = ChatRequest(model="m", messages=[{"role": "user", "content": "Hi"}])
    server = defaults("server")
    assert set(server) == {"block_size", "temperature", "top_p", "max_tokens", "seed", "stop"}
    assert (chat.temperature, chat.top_p, chat.seed) == (
        server["temperature"],
        server["top_p"],
        server["seed"],
    )
    assert chat.max_tokens is None and server["max_tokens"] is None  # the context's room
    made = request_settings(chat, 4096, server["block_size"], 4096)
    assert (made.temperature, made.top_p, made.max_tokens, made.block_size) == (
        server["temperature"],
        server["top_p"],
        4096,
        server["block_size"],
    )
    completion = CompletionRequest(model="m", prompt="Hi")
    assert request_settings(completion, COMPLETIONS_MAX_TOKENS, "auto", 4096).max_tokens == 16


def test_server_refuses_a_temperature_past_openai_s_limit():
    from pydantic import ValidationError

    most = OPTION["temperature"].server_max
    ChatRequest(model="m", messages=[{"role": "user", "content": "Hi"}], temperature=most)
    with pytest.raises(ValidationError):
        ChatRequest(model="m", messages=[{"role": "user", "content": "Hi"}], temperature=most + 1)


def test_app_defaults_are_the_table_s():
    app = AppSettings()
    offered = defaults("app")
    assert set(offered) == {"block_size", "temperature", "top_p", "max_tokens"}
    for name, value in offered.items():
        assert getattr(app, name) == value, name
    assert app.drafter == DEFAULT_DRAFTER
    made = app.generation_settings()
    assert (made.temperature, made.top_p, made.top_k, made.seed) == (0.2, 0.9, 0, None)
    assert OPTION["top_k"].app is NOT_OFFERED and "top_k" not in offered


def test_the_surfaces_differ_where_the_table_says():
    """Greedy on the CLI, a little sampling in the app, OpenAI's defaults on the server."""
    temperature = OPTION["temperature"]
    assert (temperature.default, temperature.app, temperature.server) == (0.0, 0.2, 1.0)


@pytest.mark.parametrize("option", OPTIONS, ids=[o.name for o in OPTIONS])
def test_out_of_range_is_refused_with_one_line(option):
    bad = OUT_OF_RANGE[option.name]
    with pytest.raises(SettingError) as caught:
        GenerationSettings(**{option.name: bad})
    message = str(caught.value)
    assert caught.value.field == option.name and "\n" not in message
    assert message == option.problem(bad)
    assert message.startswith(f"{option.label} must be ") and message.endswith(repr(bad))


@pytest.mark.parametrize("name", ["block_size", "temperature", "top_p", "top_k", "max_tokens"])
def test_cli_refuses_with_the_table_s_line(name):
    option = OPTION[name]
    bad = OUT_OF_RANGE[name]
    args = build_parser().parse_args(["generate", "--prompt", "Hi", option.flag, str(bad)])
    with pytest.raises(EngineError) as caught:
        generation_settings(args)
    assert str(caught.value) == option.problem(bad)


@pytest.mark.parametrize("name", ["temperature", "top_p", "max_tokens", "block_size"])
def test_server_refuses_with_the_table_s_line(name):
    bad = OUT_OF_RANGE[name]
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
    if name == "block_size":
        body["hyflash"] = {"block_size": bad}
    else:
        body[name] = float(bad) if OPTION[name].type is float else bad
    with pytest.raises(APIError) as caught:
        request_settings(ChatRequest(**body), 4096, "auto", 4096)
    assert caught.value.status == 400
    assert caught.value.message.endswith(OPTION[name].problem(body.get(name, bad)))


@pytest.mark.parametrize("name", ["block_size", "temperature", "top_p", "max_tokens"])
def test_app_refuses_with_the_table_s_line_and_its_own_limit(name):
    option = OPTION[name]
    bad = OUT_OF_RANGE[name]
    settings, problems = validate({name: bad})
    assert getattr(settings, name) == option.app and problems[name] == option.problem(bad)
    if option.app_max is not None:  # inside the engine's range, past the app's
        past = option.app_max + 1
        assert option.problem(past) is None
        settings, problems = validate({name: past})
        assert getattr(settings, name) == option.app
        assert "in the app" in problems[name] and str(option.app_max) in problems[name]


def test_kernel_choices_are_defined_once():
    from app import settings_dialog
    from engine.llama import kernels

    assert kernels.VERIFY_MODES is VERIFY_MODES and settings_dialog.VERIFY_MODES is VERIFY_MODES
    assert settings_dialog.EXTRA_BUFTS is EXTRA_BUFTS
    args = build_parser().parse_args(["generate", "--prompt", "Hi"])
    assert args.extra_bufts in EXTRA_BUFTS
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--prompt", "Hi", "--verify-mode", "quick"])


def test_settings_dialog_ranges_are_the_app_s(qtbot):
    from app.settings_dialog import SettingsDialog

    dialog = SettingsDialog(AppSettings(), (True, ""), {})
    qtbot.addWidget(dialog)
    assert dialog.temperature.maximum() == OPTION["temperature"].app_max
    assert dialog.max_tokens.maximum() == OPTION["max_tokens"].app_max
    assert dialog.block.itemData(dialog.block.count() - 1) == OPTION["block_size"].app_max
    assert dialog.temperature.toolTip() == OPTION["temperature"].help
    assert dialog.verify_mode.count() == len(VERIFY_MODES)
