"""App settings: one JSON file under the user config dir, validated field by field.

A file that is not valid JSON is moved aside (renamed with a timestamp) and defaults are used;
a field with a bad value falls back to its default alone. Either way the caller gets a message
to show, never an exception.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from app.paths import config_dir, move_aside
from engine.atomic_files import write_json
from engine.drafters import DRAFTER_CHOICES
from engine.drafters.spec import DRAFT_MODEL
from engine.events import DEFAULT_N_CTX, GenerationSettings
from engine.llama.backends import BACKEND_NAMES
from engine.llama.machine_probe import usable_cores
from engine.options import DEFAULT_DRAFTER, EXTRA_BUFTS, OPTION, VERIFY_MODES, defaults

SETTINGS_FILE = "settings.json"
# The generation options the app offers and its defaults for them: engine.options' "app"
# column (which also says why they differ from the CLI's and the server's).
APP_DEFAULTS = defaults("app")
GENERATION_FIELDS = tuple(APP_DEFAULTS)
# The engine lists its drafters simplest first; the app offers the best first.
DRAFTERS = tuple(reversed(DRAFTER_CHOICES))
DRAFTER_LABELS = {"hyflash": "HyFlash (learned)", "ngram": "N-gram lookup", "none": "None"}
BACKENDS = BACKEND_NAMES
THEMES = ("system", "light", "dark")
MIN_UI_TOP_P = 0.01  # the dialog's step; a settings file may hold any top-p in (0, 1]
# Changing one of these rebuilds the llama.cpp context, so the model is reloaded. The names are
# shared by AppSettings and app.worker.EngineConfig.
RELOAD_FIELDS = ("model", "n_ctx", "n_threads", "backend", "extra_bufts", "verify_mode")
PATH_LIST_FIELDS = ("model_files", "model_folders")  # JSON lists, tuples in AppSettings


def auto_threads() -> int:
    """Threads for 'auto'. On 1-2 cores every core: measured on a 2-core VM
    (scripts/bench_app_speed.py), 2 threads streamed 6% faster than 1 and the event loop's
    longest stall stayed at 44 ms. From 3 cores, every core but one, so the UI thread keeps
    a core of its own while llama.cpp's threads spin (not measured there: no such machine)."""
    cores = usable_cores()
    return max(1, min(cores if cores <= 2 else cores - 1, 8))


@dataclass
class AppSettings:
    block_size: str | int = APP_DEFAULTS["block_size"]  # "auto" or 1..16 (1 = speculation off)
    drafter: str = DEFAULT_DRAFTER  # falls back to ngram where no HyFlash drafter fits the model
    temperature: float = APP_DEFAULTS["temperature"]
    top_p: float = APP_DEFAULTS["top_p"]
    max_tokens: int = APP_DEFAULTS["max_tokens"]
    n_ctx: int = DEFAULT_N_CTX
    n_threads: int = 0  # 0 = auto_threads()
    backend: str = "auto"
    extra_bufts: str = "auto"
    verify_mode: str = "auto"
    model: str | None = None  # catalog id or .gguf path; None = the embedded default
    model_files: tuple[str, ...] = ()  # GGUF files added in the model manager, used in place
    model_folders: tuple[str, ...] = ()  # folders the model manager looks in for GGUF files
    theme: str = "system"
    font_size: int = 10
    tint_drafted: bool = True
    show_stats: bool = True
    server_enabled: bool = False  # the Local server (OpenAI-compatible API) runs at start
    server_port: int = 8000  # 0 = any free port
    server_lan: bool = False  # reachable from other devices: then only with server_key
    server_key: str = ""  # the API key clients send (Authorization: Bearer); "" = none

    def generation_settings(self) -> GenerationSettings:
        return GenerationSettings(**{name: getattr(self, name) for name in GENERATION_FIELDS})

    def threads(self) -> int:
        return self.n_threads or auto_threads()

    def to_dict(self) -> dict:
        return asdict(self)


def _generation_problem(name: str, value: object) -> str | None:
    """GenerationSettings' message when it refuses `value` for `name` (engine.options' row),
    else the one of the app's narrower range where the row has one."""
    option = OPTION[name]
    why = option.problem(value)
    most = option.app_max
    if why is None and most is not None and value != "auto" and value > most:
        allowed = f"'auto' or 1..{most}" if name == "block_size" else f"at most {most}"
        why = f"{option.label} must be {allowed} in the app, not {value!r}"
    return why


def _is_draft_model_spec(value: object) -> bool:
    """model:ID|PATH, a draft model (engine.drafters.spec); whether it fits the loaded model is
    the engine's to say when it switches."""
    return (
        isinstance(value, str)
        and value.startswith(DRAFT_MODEL)
        and bool(value[len(DRAFT_MODEL) :].strip())
    )


def _problem(name: str, value: object) -> str | None:
    """Why `value` is not acceptable for the field `name` (types and ranges), or None."""
    if name in GENERATION_FIELDS:
        return _generation_problem(name, value)
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if name in PATH_LIST_FIELDS:
        paths = isinstance(value, list | tuple)
        if paths and all(isinstance(v, str) and v.strip() for v in value):
            return None
        return f"{value!r} is not a list of paths"
    checks = {
        "drafter": value in DRAFTERS or _is_draft_model_spec(value),
        "n_ctx": is_int and 256 <= value <= 131072,
        "n_threads": is_int and 0 <= value <= 256,
        "backend": value in BACKENDS,
        "extra_bufts": value in EXTRA_BUFTS,
        "verify_mode": value in VERIFY_MODES,
        "model": value is None or (isinstance(value, str) and bool(value.strip())),
        "theme": value in THEMES,
        "font_size": is_int and 7 <= value <= 24,
        "tint_drafted": isinstance(value, bool),
        "show_stats": isinstance(value, bool),
        "server_enabled": isinstance(value, bool),
        "server_port": is_int and 0 <= value <= 65535,
        "server_lan": isinstance(value, bool),
        "server_key": isinstance(value, str) and value == value.strip(),
    }
    return None if checks.get(name, False) else f"{value!r} is not allowed"


def validate(data: dict) -> tuple[AppSettings, dict[str, str]]:
    """Settings from a dict, each bad field at its default; returns (settings, field -> why)."""
    values, problems = {}, {}
    for f in fields(AppSettings):
        if f.name not in data:
            continue
        value = data[f.name]
        why = _problem(f.name, value)
        if why is None:
            if f.name in PATH_LIST_FIELDS:
                value = tuple(value)  # a JSON list
            elif f.name in GENERATION_FIELDS and OPTION[f.name].type is float:
                value = float(value)
            values[f.name] = value
        else:
            problems[f.name] = why
    return replace(AppSettings(), **values), problems


def settings_from_dict(data: dict) -> tuple[AppSettings, list[str]]:
    """Settings from a dict; returns (settings, names of fields that had bad values)."""
    settings, problems = validate(data)
    return settings, list(problems)


def reset_message(problems: dict[str, str]) -> str | None:
    """What to tell the user about fields that were reset to their defaults."""
    if not problems:
        return None
    details = "; ".join(f"{name}: {why}" for name, why in problems.items())
    return f"Some settings had invalid values and were reset to their defaults ({details})."


def checked(settings: AppSettings) -> tuple[AppSettings, str | None]:
    """`settings` with every bad field back at its default (the others kept), and a message
    for the user when any was; for settings applied at run time, as load() does for the file."""
    fixed, problems = validate(asdict(settings))
    return fixed, reset_message(problems)


def needs_reload(old: AppSettings, new: AppSettings) -> list[str]:
    return [name for name in RELOAD_FIELDS if getattr(old, name) != getattr(new, name)]


class SettingsStore:
    def __init__(self, directory: Path | None = None) -> None:
        self.path = (directory or config_dir()) / SETTINGS_FILE

    def load(self) -> tuple[AppSettings, str | None]:
        """(settings, a message for the user or None)."""
        if not self.path.exists():
            return AppSettings(), None
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError("the top level is not an object")
        except (OSError, ValueError) as exc:
            try:
                moved = move_aside(self.path)
                where = f"It was moved to {moved.name}"
            except OSError as move_exc:
                where = f"It could not be moved aside ({move_exc})"
            return AppSettings(), (
                f"The settings file was damaged ({type(exc).__name__}: {exc}). {where} "
                "and the default settings are used."
            )
        settings, problems = validate(data)
        return settings, reset_message(problems)

    def save(self, settings: AppSettings) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # atomic: a crash never leaves a half-written file
        write_json(self.path, settings.to_dict(), indent=2)
