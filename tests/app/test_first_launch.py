"""The first start of the app opens on a real assistant: the catalog's first-launch model
(Qwen2.5-Coder-0.5B-Instruct, which `bootstrap.py run` installs) with its HyFlash drafter,
where its packages are installed; else the embedded model. Later starts keep what was saved."""

from __future__ import annotations

from app.main import parse_args, startup_overrides
from app.settings import AppSettings
from engine.drafters.spec import hyflash_status
from engine.models.catalog import first_launch_id

QWEN = "qwen2.5-coder-0.5b-instruct"


def test_the_first_start_opens_on_the_installed_assistant_with_its_drafter():
    assert first_launch_id() == QWEN
    assert startup_overrides(parse_args([]), first_launch=True) == {"model": QWEN}
    assert AppSettings().drafter == "hyflash" and hyflash_status(QWEN) == (True, "")


def test_later_starts_and_named_models_keep_their_choice():
    assert startup_overrides(parse_args([]), first_launch=False) == {}
    named = startup_overrides(parse_args(["--model", "mine.gguf"]), first_launch=True)
    assert named == {"model": "mine.gguf"}


def test_without_the_assistants_packages_the_embedded_model_opens(monkeypatch):
    import engine.models.resolve as resolve

    monkeypatch.setattr(resolve, "parts_installed", lambda source: False)
    assert startup_overrides(parse_args([]), first_launch=True) == {}
