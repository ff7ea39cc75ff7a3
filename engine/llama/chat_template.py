"""Chat formatting from the GGUF's own Jinja chat template, rendered in a sandbox."""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.events import EngineError

if TYPE_CHECKING:
    from engine.llama.target import LlamaTarget

# Used only when a GGUF carries no template: ChatML, which most small instruct models use.
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Gemma's turn format, for a Gemma-family GGUF without a template (the base checkpoints ship
# none): its turn markers are control tokens, whereas ChatML would reach it as plain text that
# the model then echoes. A system message opens the first user turn, as Gemma's own template.
GEMMA_TURNS = (
    "{{ bos_token }}"
    "{% set ns = namespace(prefix='') %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% set ns.prefix = message['content'] + '\\n\\n' %}"
    "{% else %}"
    "{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else 'user') + '\\n' }}"
    "{{ ns.prefix + message['content'] + '<end_of_turn>\\n' }}"
    "{% set ns.prefix = '' %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)
FALLBACKS = ((("<start_of_turn>", "<end_of_turn>"), GEMMA_TURNS),)


def fallback_template(is_control_token) -> str:
    """The format for a GGUF without a template: the first family whose turn markers the
    vocabulary holds as single control tokens (is_control_token(text) -> bool), else ChatML."""
    for markers, source in FALLBACKS:
        if all(is_control_token(m) for m in markers):
            return source
    return CHATML


def _raise(message: str) -> None:
    raise TemplateError(message)


class ChatTemplate:
    def __init__(self, source: str | None, bos_token: str = "", eos_token: str = "") -> None:
        self.source = source or CHATML
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: date.today().strftime(fmt)
        try:
            self._template = env.from_string(self.source)
        except TemplateError as exc:
            raise EngineError(f"the model's chat template does not parse: {exc}") from exc
        self.bos_token = bos_token
        self.eos_token = eos_token

    @classmethod
    def for_target(cls, target: LlamaTarget) -> ChatTemplate:
        """The GGUF's own template (or the fallback for its family) with its BOS/EOS texts."""
        return cls(
            target.chat_template() or fallback_template(target.is_control_token),
            target.token_text(target.bos_token),
            target.token_text(target.eos_token),
        )

    def tokenize(self, target: LlamaTarget, messages: list[dict]) -> list[int]:
        """Render and tokenize, adding BOS only when the model wants one and the template did
        not already write it."""
        text = self.render(messages)
        add_bos = target.adds_bos() and not (self.bos_token and text.startswith(self.bos_token))
        return target.tokenize(text, add_special=add_bos, parse_special=True)

    def render(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        for m in messages:
            if m.get("role") not in {"system", "user", "assistant"}:
                raise EngineError(f"unknown chat role {m.get('role')!r}")
        try:
            return self._template.render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except TemplateError as exc:
            raise EngineError(f"the model's chat template failed: {exc}") from exc
