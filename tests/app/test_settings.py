"""The app's settings: the file round trip, bad values one by one, what the engine refuses,
the dialog's choices, reloads, and the thread count per machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from app.settings import (
    AppSettings,
    SettingsStore,
    checked,
    needs_reload,
    settings_from_dict,
)
from app.settings_dialog import SettingsDialog
from engine.events import GenerationSettings
from engine.paths import REPO


def test_settings_round_trip(tmp_path):
    store = SettingsStore(tmp_path)
    settings, message = store.load()
    assert message is None and settings == AppSettings()
    settings.block_size = 4
    settings.theme = "dark"
    store.save(settings)
    again, message = SettingsStore(tmp_path).load()
    assert message is None
    assert again.block_size == 4 and again.theme == "dark"


def test_model_files_and_folders_round_trip_and_bad_ones_fall_back(tmp_path):
    store = SettingsStore(tmp_path)
    files, folders = ("/models/a.gguf", "C:\\Models\\b.gguf"), ("/models", "~/more models")
    store.save(AppSettings(model_files=files, model_folders=folders))
    saved = json.loads((tmp_path / "settings.json").read_text(encoding="utf-8"))
    assert saved["model_files"] == list(files)  # JSON lists
    again, message = store.load()
    assert message is None and (again.model_files, again.model_folders) == (files, folders)
    assert again == AppSettings(model_files=files, model_folders=folders)
    for bad in ("/models/a.gguf", ["/ok.gguf", 3], [""], {"a": 1}):
        data = {"model_files": bad, "model_folders": ["/models"], "theme": "dark"}
        (tmp_path / "settings.json").write_text(json.dumps(data), encoding="utf-8")
        settings, message = store.load()
        assert settings.model_files == () and settings.model_folders == ("/models",)
        assert settings.theme == "dark" and "model_files" in message and "list of paths" in message


def test_corrupt_settings_file_is_moved_aside(tmp_path):
    (tmp_path / "settings.json").write_text("{not json", encoding="utf-8")
    settings, message = SettingsStore(tmp_path).load()
    assert settings == AppSettings()
    assert message and "damaged" in message
    moved = list(tmp_path.glob("settings.corrupt-*.json"))
    assert len(moved) == 1 and moved[0].read_text() == "{not json"
    assert not (tmp_path / "settings.json").exists()


def test_bad_setting_values_fall_back_one_by_one(tmp_path):
    data = {"block_size": 99, "temperature": "hot", "theme": "dark", "n_ctx": 2048}
    (tmp_path / "settings.json").write_text(json.dumps(data), encoding="utf-8")
    settings, message = SettingsStore(tmp_path).load()
    assert settings.block_size == "auto" and settings.temperature == AppSettings().temperature
    assert settings.theme == "dark" and settings.n_ctx == 2048
    assert "block_size" in message and "temperature" in message


def test_sampling_values_the_engine_refuses_are_reset_with_its_message(tmp_path):
    data = {"temperature": -1, "top_p": 5, "theme": "dark", "max_tokens": 100}
    (tmp_path / "settings.json").write_text(json.dumps(data), encoding="utf-8")
    settings, message = SettingsStore(tmp_path).load()
    defaults = AppSettings()
    assert (settings.temperature, settings.top_p) == (defaults.temperature, defaults.top_p)
    assert settings.theme == "dark" and settings.max_tokens == 100  # nothing else is lost
    assert "temperature must be 0 (greedy) or more, not -1" in message
    assert "top-p must be above 0 and at most 1, not 5" in message
    # settings applied at run time get the same rule
    fixed, message = checked(AppSettings(temperature=float("nan"), top_p=0.0, n_ctx=2048))
    assert (fixed.temperature, fixed.top_p, fixed.n_ctx) == (0.2, 0.9, 2048)
    assert "temperature" in message and "top-p" in message
    assert checked(AppSettings(temperature=0.0, top_p=1.0)) == (
        AppSettings(temperature=0.0, top_p=1.0),
        None,
    )


def test_settings_dialog_cannot_produce_sampling_values_the_engine_refuses(qtbot):
    dialog = SettingsDialog(AppSettings(), (True, ""), {})
    qtbot.addWidget(dialog)
    for temperature, top_p in ((-1.0, 5.0), (99.0, -3.0), (0.0, 0.0)):
        dialog.temperature.setValue(temperature)
        dialog.top_p.setValue(top_p)
        values = dialog.values()
        GenerationSettings(temperature=values.temperature, top_p=values.top_p)  # raises if bad
        assert checked(values)[1] is None


def test_drafter_and_backend_choices_come_from_the_engine():
    from app import settings
    from engine.drafters import DRAFTER_CHOICES
    from engine.llama.backends import BACKEND_NAMES

    assert sorted(settings.DRAFTERS) == sorted(DRAFTER_CHOICES)
    assert settings.BACKENDS == BACKEND_NAMES


def test_reload_needed_only_for_runtime_fields():
    base = AppSettings()
    assert needs_reload(base, AppSettings(block_size=2, drafter="none", temperature=1.0)) == []
    assert needs_reload(base, AppSettings(n_ctx=2048, backend="cpu")) == ["n_ctx", "backend"]
    settings, bad = settings_from_dict({"block_size": 1, "n_threads": 2})
    assert bad == [] and settings.generation_settings().block_size == 1


@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 2), (4, 3), (8, 7), (64, 8)])
def test_auto_threads_per_core_count(monkeypatch, cores, threads):
    from app import settings

    monkeypatch.setattr(settings, "usable_cores", lambda: cores)
    assert settings.auto_threads() == threads


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU sets are Linux's")
def test_threads_follow_the_cores_the_process_may_use():
    # a process pinned to one core (taskset, a container's CPU set) gets one thread, whatever
    # the machine has
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
        "from app.settings import auto_threads; from engine.llama.target import default_threads; "
        "print(auto_threads(), default_threads())"
    )
    repo = REPO
    env = {**os.environ, "PYTHONPATH": str(repo)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=repo, env=env
    )
    assert out.stdout.split() == ["1", "1"]


def test_a_draft_model_is_a_drafter_choice_for_the_models_it_fits(qtbot):
    from app.capabilities import draft_models

    # installed catalog models of the same vocabulary, smaller than the loaded one
    offered = draft_models("qwen2.5-coder-1.5b-instruct")
    assert [spec for spec, _ in offered] == ["model:qwen2.5-coder-0.5b-instruct"]
    assert offered[0][1].startswith("Draft model: Qwen2.5 Coder 0.5B")
    assert draft_models(None) == []  # nothing smaller drafts for the embedded model
    dialog = SettingsDialog(AppSettings(), (True, ""), {}, draft_models=offered)
    qtbot.addWidget(dialog)
    dialog.drafter.setCurrentIndex(dialog.drafter.findData(offered[0][0]))
    chosen = dialog.values()
    assert chosen.drafter == "model:qwen2.5-coder-0.5b-instruct"
    assert checked(chosen) == (chosen, None)
    # a saved draft model that does not fit the loaded model stays chosen, marked as such
    again = SettingsDialog(chosen, (True, ""), {}, draft_models=[])
    qtbot.addWidget(again)
    assert again.values().drafter == chosen.drafter
    assert "not for this model" in again.drafter.currentText()
    fixed, message = checked(AppSettings(drafter="model:  "))
    assert fixed.drafter == AppSettings().drafter and "drafter" in message
