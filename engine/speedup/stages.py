"""The stages of a speed-up job after its plan (engine/commands/speedup.py), each the project's
own command or library call, in-process: self-distilled and held-out answers, features,
training by the shipped recipe, INT8 export, the held-out walk against n-gram lookup, and the
install into the user's drafters."""

from __future__ import annotations

import argparse
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from engine.atomic_files import write_json
from engine.drafters.installed import install_drafter, slug
from engine.speedup.job import MAX_LEN, Job, rows
from engine.speedup.plan import (
    BLOCK,
    SpeedupError,
    draft_vocab_size,
    expected_speedup,
    install_decision,
)

# the shipped recipe (scripts/v4_baselines.sh) beside `hyflash train`'s defaults: d=384,
# 1 layer, window 64, Mamba-2 memory; the draft vocabulary sized by the target's
# (plan.draft_vocab_size)
RECIPE = ("--causal-slots", "--copy-trust", "0.2", "--block-size", str(BLOCK))
MAX_PROMPT_TOKENS = 512  # as `hyflash data generate`
CONVERSATION_TOKENS = 384  # `hyflash data conversations --max-tokens`


# A project command's options exactly as its command line gives them: (command, e.g. "data
# conversations", bare flags, then --option value per keyword). The command that starts the
# job passes it in (engine.commands.speedup), so this room never imports the command line.
ParseCommand = Callable[..., argparse.Namespace]


class Pipeline:
    """The stages after the plan, in order; each returns what state.json keeps of it."""

    def __init__(
        self,
        job: Job,
        gguf: Path,
        model_id: str,
        sha: str,
        calib: dict,
        choice: dict,
        args: argparse.Namespace,
        reporter,
        parse_command: ParseCommand,
    ) -> None:
        self.job, self.gguf, self.model_id, self.sha = job, gguf, model_id, sha
        self.budget = job.budget
        self.calib, self.choice = calib, choice
        self.args, self.reporter = args, reporter
        self._cli = parse_command
        self.name = f"{slug(model_id)}-{sha[:8]}"

    # ----- answers ----------------------------------------------------------------------------

    def answers(self) -> dict:
        from engine.bench.corpora import train_prompts
        from engine.training.distill import done_keys

        out, want = self.job.answers, self.budget.answers
        have, offered = rows(out), set(done_keys(out))
        self.reporter.progress("answers", have, want, "answers")
        prompts = train_prompts()
        # prompts too long for the context are skipped by the generator: offer more until
        # the corpus holds the budget's answers or the prompts run out
        while have < want:
            batch = [p for p in prompts if p.key not in offered][: want - have]
            if not batch:
                break
            offered |= {p.key for p in batch}
            self._generate(batch, have, want)
            have = rows(out)
        conversations = self._conversations()
        return {
            "answers": have,
            "conversations": conversations,
            "generator": self.choice["generator"],
        }

    def _generate(self, prompts: list, have: int, want: int) -> None:
        def progress(done: int, _total: int, _tok_s: float) -> None:
            self.reporter.progress("answers", min(have + done, want), want, "answers")

        tokens = self.budget.answer_tokens
        if self.choice["generator"] == "torch":
            from engine.llama.target import LlamaTarget
            from engine.training.data_run import prompts_to_answer
            from engine.training.target_vocab import eog_ids
            from engine.training.torch_target import TorchTarget, generate_answers

            with LlamaTarget(self.gguf, n_ctx=64) as probe:
                todo = prompts_to_answer(probe, prompts, self.job.answers, MAX_PROMPT_TOKENS)
            rates = self.calib["torch"]
            target = TorchTarget(
                self.gguf, dtype=rates["dtype"], device=rates["device"], threads=self.args.threads
            )
            try:
                generate_answers(
                    target,
                    todo,
                    self.job.answers,
                    batch=rates["streams"],
                    max_tokens=tokens,
                    eos_ids=eog_ids(self.gguf),
                    progress=progress,
                )
            finally:
                target.close()
        else:
            streams = self.calib["llama"]["streams"]
            self._llama_answers(prompts, self.job.answers, streams, tokens, progress)

    def _llama_answers(self, prompts: list, out: Path, streams: int, tokens: int, progress) -> None:
        from engine.llama.target import LlamaTarget
        from engine.training.distill import generate_corpus

        with LlamaTarget(self.gguf, n_ctx=MAX_PROMPT_TOKENS, n_threads=self.args.threads) as t:
            generate_corpus(
                t,
                prompts,
                out,
                streams=streams,
                max_tokens=tokens,
                max_prompt_tokens=MAX_PROMPT_TOKENS,
                n_threads=self.args.threads,
                progress=progress,
            )

    def _conversations(self) -> int:
        from engine.training.data_run import cmd_data_conversations

        path, want = self.job.conversations, self.budget.conversations
        have = rows(path)
        if have < want:
            cmd_data_conversations(
                self._cli(
                    "data conversations",
                    model=self.gguf,
                    out=path,
                    limit=want - have,
                    max_tokens=CONVERSATION_TOKENS,
                )
            )
        return rows(path)

    def heldout(self) -> dict:
        from engine.bench.corpora import eval_prompts

        per_set = self.budget.heldout_per_set
        prompts = [p for ps in eval_prompts().values() for p in ps[:per_set]]

        def progress(done: int, total: int, _tok_s: float) -> None:
            self.reporter.progress("heldout", done, total, "answers")

        self._llama_answers(prompts, self.job.heldout, 1, self.budget.heldout_tokens, progress)
        return {"heldout": rows(self.job.heldout)}

    # ----- features and training -----------------------------------------------------------

    def _feature_source(self) -> str:
        from engine.training.features import resolve_source

        side = self.choice["features"]
        return resolve_source(side, self.calib["torch"]["dtype"], self.calib["torch"]["device"])

    def _corpora(self) -> list[tuple[Path, int | None, bool]]:
        """(file, first N sequences, with target labels) as `hyflash train` reads them: the
        budget's answers (a --corpus may hold more; its first N, in the prompt mix's order)."""
        corpora = [(self.job.answers, self.budget.answers, False)]
        if rows(self.job.conversations):
            corpora.append((self.job.conversations, None, True))
        return corpora

    def features(self) -> dict:
        from engine.training.features import cache_dir_for, feature_cache, load_corpus

        source = self._feature_source()
        loaded = []
        for path, n, labels in self._corpora():
            tokens, _, keys = load_corpus(path, MAX_LEN)
            loaded.append((tokens[:n], keys[:n], labels))
        total = sum(len(t) for t, _, _ in loaded)
        offset = 0
        for tokens, keys, labels in loaded:

            def progress(done: int, _n: int, offset: int = offset) -> None:
                self.reporter.progress("features", offset + done, total, "sequences")

            feature_cache(
                tokens,
                self.gguf,
                cache_dir_for(self.gguf, keys, labels, source),
                threads=self.args.threads,
                progress=progress,
                with_labels=labels,
                source=source,
                device=self.calib["torch"]["device"],
            )
            offset += len(tokens)
        return {"source": source, "sequences": total}

    def train(self) -> dict:
        from engine.training.target_vocab import embedding_shape
        from engine.training.train_run import cmd_train

        vocab, _ = embedding_shape(self.gguf)
        side = self.choice["features"]
        torch_side = self.calib["torch"]
        device = torch_side["device"] if torch_side["device"] in ("cpu", "cuda") else "auto"
        options = dict(
            model=self.gguf,
            corpus=self.job.answers,
            max_answers=self.budget.answers,
            out=self.job.run_dir,
            steps=self.budget.steps,
            eval_every=self.budget.eval_every,
            max_len=MAX_LEN,
            threads=self.args.threads,
            feature_source=side,
            torch_dtype=torch_side["dtype"],
            torch_device=device,
            draft_vocab=draft_vocab_size(vocab),
        )
        if len(self._corpora()) > 1:
            options["extra_corpus"] = self.job.conversations
        steps = self.budget.steps
        every = max(1, steps // 200)  # loss points: a curve, not a flood

        def on_step(record: dict) -> None:
            self.reporter.progress("train", record["step"], steps, "steps")
            if record["step"] % every == 0 or record["step"] == steps:
                self.reporter.loss(record["step"], steps, record["loss"])

        if cmd_train(self._cli("train", *RECIPE, "--quiet", **options), on_step=on_step) != 0:
            raise SpeedupError("failed", f"no usable training answers in {self.job.answers}")
        history = json.loads((self.job.run_dir / "history.json").read_text())
        return {"steps": history[-1]["step"], "final_loss": history[-1]["loss"]}

    # ----- export, validation, install ---------------------------------------------------------

    def export(self) -> dict:
        from engine.training.train_run import cmd_export

        run = self.job.run_dir
        checkpoint = "best.pt" if (run / "best.pt").exists() else "checkpoint.pt"
        partial = self.job.budget_dir / "drafter.partial"
        shutil.rmtree(partial, ignore_errors=True)
        cmd_export(
            self._cli(
                "export",
                run=run,
                out=partial,
                model=self.gguf,
                name=self.name,
                checkpoint=checkpoint,
                quantize="int8",
                keep_only="int8",
            )
        )
        shutil.rmtree(self.job.drafter_dir, ignore_errors=True)
        os.replace(partial, self.job.drafter_dir)
        return {
            "checkpoint": checkpoint,
            "files": sorted(f.name for f in self.job.drafter_dir.iterdir()),
        }

    def validate(self) -> dict:
        from engine.training.acceptance import run as walk

        self.reporter.progress("validate", 0, 3, "steps")
        walked = walk(
            self._cli(
                "acceptance",
                "--drafter=ngram",
                f"--drafter=hyflash={self.job.drafter_dir}",
                answers=self.job.heldout,
                blocks=BLOCK,
                model=self.gguf,
                threads=self.args.threads,
            )
        )
        by_drafter = {r["drafter"]: r for r in walked["rows"]}
        self.reporter.progress("validate", 2, 3, "steps")
        costs = verify_costs(self.gguf, self.args.threads)
        mine = by_drafter["hyflash"]
        speedup = expected_speedup(mine["accepted_histogram"], costs, mine["drafter_ms"] / 1000)
        check = {
            "tau": mine["tau"],
            "ngram_tau": by_drafter["ngram"]["tau"],
            "block": BLOCK,
            "heldout_answers": walked["sequences"],
            "heldout_tokens": walked["answer_tokens"],
            "expected_speedup": speedup,
            "budget": self.budget.name,
        }
        # the walk as its own command reproduces it (sys.argv here is speedup's)
        command = (
            f"hyflash acceptance --model {self.gguf} --answers {self.job.heldout} "
            f"--drafter ngram --drafter hyflash={self.job.drafter_dir} --blocks {BLOCK} "
            f"--threads {self.args.threads}"
        )
        write_json(
            self.job.budget_dir / "validate.json",
            walked | {"command": command, "verify_cost_s": costs, "expected_speedup": speedup},
            indent=2,
        )
        card_path = self.job.drafter_dir / "card.json"
        card = json.loads(card_path.read_text(encoding="utf-8"))
        write_json(card_path, card | {"validation": check}, indent=2)  # doctor lists it
        self.reporter.progress("validate", 3, 3, "steps")
        return check

    def install(self) -> dict:
        from engine.models.catalog import load_catalog

        check = self.job.stages["validate"]["result"]
        policy = self.args.install
        install, reason = install_decision(
            policy, check["tau"], check["ngram_tau"], check["heldout_answers"]
        )
        if not install:
            return {
                "installed": False,
                "drafter_dir": str(self.job.drafter_dir),
                "reason": f"{reason}; kept for inspection in {self.job.drafter_dir}",
                "policy": policy,
            }
        dest = install_drafter(self.job.drafter_dir, self.gguf, self.name)
        entry = load_catalog().get(self.model_id)
        if entry is not None and entry.drafter:
            reason += (
                f"; '{self.model_id}' ships a drafter, which comes first for that id: open the "
                "GGUF by its path to use this one"
            )
        return {"installed": True, "drafter_dir": str(dest), "reason": reason, "policy": policy}


def verify_costs(gguf: Path, threads: int) -> dict[int, float]:
    """T(n) in seconds as the engine measures it on this machine at load (block size auto)."""
    from engine.engine import Engine

    engine = Engine(gguf, drafter="none", n_ctx=512, n_threads=threads)
    try:
        return dict(engine.cost.measured)
    finally:
        engine.close()
