"""`hyflash results render [--check]`: the tables of docs/RESULTS.md, generated from raw files.

A generated table sits between two markers:

    <!-- table: RENDERER FILE [FILE ...] [option=value ...] -->
    | ... |
    <!-- /table -->

FILE paths are relative to the repository root. `render` rewrites every marked table from its
files; `--check` rewrites nothing and exits 1 naming each table whose committed text differs
from what its files give, so no number in a marked table is typed by hand. The renderers are
the commands' own table code where the command prints that table.

Renderers:
  speed FILE             hyflash bench's table: every configuration against plain decoding
  speed-runs FILE...     runs of the same configurations side by side (greedy, sampled, ...):
                         speedup [interval], tau and drafter ms per run (runs="A|B" names
                         runs of the same sampling)
  speed-cost-curve FILE  hyflash bench's T(B)/T(1) row
  drafter-time FILE      hyflash drafter-time's table
  acceptance FILE...     hyflash acceptance rows (every drafter of every file, first file
                         wins for a label), columns chosen by cols=a,b,... (default tau,ms,mem):
                         tau (one per block), reach, sets, set-columns, reach-columns, late, ms,
                         share, mem, files, vs-ngram; block=B for the single-block columns
                         (default: the largest walked); rows="LABEL|LABEL" picks and orders
                         drafters
  speedup-costs RESULT VALIDATE
                         hyflash speedup's stage times, verify costs and expected speed-up
  speedup-stages FILE... stage seconds and total per file, a row each: a job's result.json
                         (measured; measured=TEXT names the machine) or `hyflash speedup
                         --project ... --json` (projected; the profile names the device)
  projection FILE...     hyflash bench --cost-curve's projection (drafter free) of chosen
                         configurations: keys="K,K|K" (per file), runs="NAME|NAME"
  app-speed FILE...      scripts/bench_app_speed.py's table, several runs side by side
                         (runs="before|after" names them) or pooled into one (pooled=yes)
  app-render FILE...     scripts/profile_app_render.py's table: UI CPU per streamed token
  kernels FILE...        the kernel check of `hyflash doctor --json`, a row per file
                         (labels="A|B" names the models): exactness and T(B)/T(1)
  generate-runs PLAIN FILE...
                         `hyflash generate --json` answers against the plain one: tokens
                         equal to plain, tau, tok/s (labels="A|B" names the runs)
  validation FILE...     validation tau estimate / slot-1 accuracy per training step, from a
                         run's history.json or a drafter's card.json (labels=, steps=1,2,...)
  torch-check FILE       hyflash data torch-check's table
  vocab-coverage FILE    hyflash data vocab-coverage's table: held-out coverage per draft
                         vocabulary size
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.bench.app_tables import app_speed_table, pooled_app_speed_rows, render_cost_table
from engine.bench.drafter_time import time_table
from engine.bench.report import markdown_table
from engine.bench.speed import cost_curve_table, interval_text, sampling_text, summary_table
from engine.paths import REPO
from engine.training.torch_check import torch_check_table
from engine.training.vocab_coverage import coverage_table

RESULTS = REPO / "docs" / "RESULTS.md"
_MARKER = re.compile(r"^<!-- table: (?P<spec>.+?) -->\n(?P<body>.*?)^<!-- /table -->$", re.M | re.S)
# held-out set names as RESULTS writes them
SET_NAMES = {
    "aime2025": "AIME",
    "gsm8k": "GSM8K",
    "humaneval": "HumanEval",
    "math500": "MATH",
    "mbpp": "MBPP",
    "mtbench": "MT-Bench",
}
_REACHES = ("near", "distant", "novel")


@dataclass(frozen=True)
class Table:
    spec: str  # the marker's text: renderer, files, options
    line: int  # of the opening marker, 1-based
    body: str  # the committed text between the markers

    @property
    def name(self) -> str:
        return f"line {self.line}: {self.spec}"


def render_table(spec: str, root: Path = REPO) -> str:
    """The text of one marked table (lines ending in newlines) from its files."""
    words = shlex.split(spec)
    if not words or words[0] not in RENDERERS:
        raise ValueError(f"unknown table renderer in '{spec}': use one of {', '.join(RENDERERS)}")
    files = [w for w in words[1:] if "=" not in w]
    options = dict(w.split("=", 1) for w in words[1:] if "=" in w)
    results = []
    for f in files:
        try:
            results.append(json.loads((root / f).read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise ValueError(f"table '{spec}': cannot read {f}: {exc}") from exc
    try:
        lines = RENDERERS[words[0]](results, options)
    except (KeyError, IndexError, TypeError, StopIteration) as exc:
        raise ValueError(f"table '{spec}': its files lack {exc!r}") from exc
    return "\n".join(lines) + "\n"


def _found(text: str, m: re.Match) -> Table:
    return Table(m["spec"], text.count("\n", 0, m.start()) + 1, m["body"])


def tables(text: str) -> list[Table]:
    return [_found(text, m) for m in _MARKER.finditer(text)]


def render_text(text: str, root: Path = REPO) -> tuple[str, list[Table]]:
    """(the text with every marked table regenerated, the tables whose text changed)."""
    changed = []

    def fill(m: re.Match) -> str:
        table = _found(text, m)
        if "<!-- table:" in table.body:  # its closing marker is missing: it would eat the next
            raise ValueError(f"{table.name} has no <!-- /table --> before the next table")
        body = render_table(table.spec, root)
        if body != table.body:
            changed.append(table)
        return f"<!-- table: {table.spec} -->\n{body}<!-- /table -->"

    return _MARKER.sub(fill, text), changed


# ----- renderers --------------------------------------------------------------------------------


def _one(results: list[dict], name: str) -> dict:
    if len(results) != 1:
        raise ValueError(f"the {name} renderer takes one file, not {len(results)}")
    return results[0]


def _names(options: dict[str, str], key: str, results: list) -> list[str]:
    """One name per file from an option such as runs="before|after"."""
    names = options[key].split("|")
    if len(names) != len(results):
        raise ValueError(f"{key}= names {len(names)} files, the table has {len(results)}")
    return names


def _acceptance(results: list[dict], options: dict[str, str]) -> list[str]:
    rows: dict[tuple[str, int], dict] = {}
    decode_ms: dict[str, float] = {}
    for result in results:
        for r in result["rows"]:
            if (r["drafter"], r["block"]) not in rows:
                rows[(r["drafter"], r["block"])] = r
                decode_ms.setdefault(r["drafter"], result["target_decode_ms"])
    labels = list(dict.fromkeys(label for label, _ in rows))
    if "rows" in options:  # a choice of drafters, in this order: rows="ngram|HyFlash v4"
        labels = options["rows"].split("|")
        missing = [label for label in labels if not any(k[0] == label for k in rows)]
        if missing:
            raise ValueError(f"no drafter {', '.join(missing)} in the acceptance files")
    blocks = sorted({b for _, b in rows})
    if "blocks" in options:
        blocks = [int(b) for b in options["blocks"].split(",")]
    big = int(options.get("block", blocks[-1]))
    columns = options.get("cols", "tau,ms,mem").split(",")
    first = rows[(labels[0], big)]
    head = ["drafter"]
    for c in columns:
        head += _HEADS[c](blocks, big, first)
    body = []
    for label in labels:
        cells = [label]
        for c in columns:
            cells += _CELLS[c](rows, label, blocks, big, decode_ms[label])
        body.append(cells)
    return markdown_table(head, body)


def _get(rows: dict, label: str, block: int) -> dict | None:
    return rows.get((label, block))


def _kib(n: float) -> str:
    return f"{n / 1024:,.0f} KiB"


def _sets(row: dict) -> list[str]:
    return sorted(row["per_set_tau"])


def _files(row: dict) -> list[str]:
    return list(row["per_file"])


_HEADS: dict[str, Callable[[list[int], int, dict], list[str]]] = {
    "tau": lambda blocks, big, first: [f"tau B={b}" for b in blocks],
    "reach": lambda blocks, big, first: [f"near / distant / novel (B={big})"],
    "sets": lambda blocks, big, first: [
        " / ".join(SET_NAMES.get(s, s) for s in _sets(first)) + f" (B={big})"
    ],
    "set-columns": lambda blocks, big, first: [SET_NAMES.get(s, s) for s in _sets(first)],
    "reach-columns": lambda blocks, big, first: [
        f"{r} ({first['accepted_by_reach'].get(r, {}).get('steps', 0)})" for r in _REACHES
    ],
    "late": lambda blocks, big, first: [f"late slots {max(1, big // 2)}-{big - 1}: P(accepted)"],
    "ms": lambda blocks, big, first: [f"drafter ms/step (B={' / '.join(map(str, blocks))})"],
    "share": lambda blocks, big, first: ["drafter / decode"],
    "mem": lambda blocks, big, first: ["draft memory (max)"],
    "files": lambda blocks, big, first: [
        f"{f} (mean {first['per_file'][f]['context_tokens_mean']:,.0f} tokens): tau B={big}, "
        "draft memory"
        for f in _files(first)
    ],
    "vs-ngram": lambda blocks, big, first: [f"vs n-gram (B={big})"],
}


def _num(row: dict | None, fmt: Callable[[dict], str]) -> str:
    return "-" if row is None else fmt(row)


def _cells_tau(rows, label, blocks, big, decode_ms):
    return [_num(_get(rows, label, b), lambda r: f"{r['tau']:.2f}") for b in blocks]


def _reach_means(r: dict) -> list[str]:
    reach = r["accepted_by_reach"]
    return [f"{reach[k]['mean_accepted']:.2f}" if k in reach else "-" for k in _REACHES]


def _cells_reach(rows, label, blocks, big, decode_ms):
    return [_num(_get(rows, label, big), lambda r: " / ".join(_reach_means(r)))]


def _cells_sets(rows, label, blocks, big, decode_ms):
    r = _get(rows, label, big)
    return [_num(r, lambda r: " / ".join(f"{r['per_set_tau'][s]:.2f}" for s in _sets(r)))]


def _cells_set_columns(rows, label, blocks, big, decode_ms):
    r = _get(rows, label, big)
    return [f"{t:.2f}" for _, t in sorted(r["per_set_tau"].items())]


def _cells_reach_columns(rows, label, blocks, big, decode_ms):
    return _reach_means(_get(rows, label, big))


def _cells_late(rows, label, blocks, big, decode_ms):
    return [_num(_get(rows, label, big), lambda r: f"{r['late_slot_accept']:.3f}")]


def _cells_ms(rows, label, blocks, big, decode_ms):
    cells = [_num(_get(rows, label, b), lambda r: f"{r['drafter_ms']:.2f}") for b in blocks]
    return [" / ".join(cells)]


def _cells_share(rows, label, blocks, big, decode_ms):
    cells = [
        _num(_get(rows, label, b), lambda r: f"{100 * r['drafter_ms'] / decode_ms:.0f}%")
        for b in blocks
    ]
    return [" / ".join(cells)]


def _cells_mem(rows, label, blocks, big, decode_ms):
    r = next(rows[(label, b)] for b in blocks if (label, b) in rows)
    return [_kib(r["memory_bytes_max"])]


def _cells_files(rows, label, blocks, big, decode_ms):
    r = _get(rows, label, big)
    return [
        f"{r['per_file'][f]['tau']:.2f}, {_kib(r['per_file'][f]['memory_bytes_max'])}"
        for f in _files(r)
    ]


def _cells_vs_ngram(rows, label, blocks, big, decode_ms):
    ngram = _get(rows, "ngram", big)
    r = _get(rows, label, big)
    if ngram is None or r is None:
        return ["-"]
    return [f"{r['tau'] / ngram['tau']:.2f}x"]


_CELLS = {
    "tau": _cells_tau,
    "reach": _cells_reach,
    "sets": _cells_sets,
    "set-columns": _cells_set_columns,
    "reach-columns": _cells_reach_columns,
    "late": _cells_late,
    "ms": _cells_ms,
    "share": _cells_share,
    "mem": _cells_mem,
    "files": _cells_files,
    "vs-ngram": _cells_vs_ngram,
}


def _speed_runs(results: list[dict], options: dict[str, str]) -> list[str]:
    """Runs of the same configurations side by side (greedy and sampled, or reruns): per run
    the speedup over plain decoding with its interval (plain: its tok/s), tau, drafter ms."""
    head = ["config"]
    runs = [sampling_text(r.get("temperature", 0.0), r.get("top_p", 1.0)) for r in results]
    if "runs" in options:  # runs of the same sampling: runs="before|after"
        runs = _names(options, "runs", results)
    for run in runs:
        head += [f"{run}: speedup [95% interval]", "tau", "drafter ms/step"]
    by_key = [{s["key"]: s for s in r["summary"]} for r in results]
    body = []
    for s in results[0]["summary"]:
        cells = [s["config"]]
        for runs in by_key:
            row = runs.get(s["key"])
            if row is None:
                cells += ["-", "-", "-"]
            elif row["key"] == "none:1":
                cells += [f"1.00x ({row['tok_s']:.1f} tok/s)", f"{row['tau']:.2f}", ""]
            else:
                speedup = f"{row['speedup']:.2f}x{interval_text(row.get('speedup_ci'))}"
                cells += [speedup, f"{row['tau']:.2f}", f"{row['draft_ms']:.2f}"]
        body.append(cells)
    return markdown_table(head, body)


def _speedup_costs(results: list[dict], options: dict[str, str]) -> list[str]:
    if len(results) != 2:
        raise ValueError("speedup-costs takes result.json and validate.json")
    result, validate = results
    stages = result["stage_seconds"]
    cost = {int(b): s for b, s in validate["verify_cost_s"].items()}
    ratios = [b for b in (2, 4, 8, 16) if b in cost]
    head = [
        *(f"{s} (s)" for s in ("features", "train", "export", "validate")),
        "T(1) ms",
        *(f"T({b})/T(1)" for b in ratios),
        "expected speed-up",
    ]
    row = [
        *(f"{stages[s]:,.0f}" for s in ("features", "train", "export", "validate")),
        f"{1000 * cost[1]:.1f}",
        *(f"{cost[b] / cost[1]:.2f}" for b in ratios),
        f"{result['expected_speedup']:.2f}",
    ]
    return markdown_table(head, [row])


def _speedup_stages(results: list[dict], options: dict[str, str]) -> list[str]:
    from engine.speedup.plan import STAGES

    rows = []
    for r in results:
        if r.get("label") == "projection":
            seconds = {s["name"]: s["eta_s"] for s in r["stages"]}
            machine = f"{r['device']} (projection)"
        else:
            seconds = r["stage_seconds"]
            machine = f"{options.get('measured', 'this machine')} (measured)"
        total = sum(seconds[s] for s in STAGES)
        rows.append([machine, *(f"{seconds[s]:,.0f}" for s in STAGES), f"{total:,.0f}"])
    return markdown_table(["machine", *(f"{s} (s)" for s in STAGES), "total (s)"], rows)


def _projection(results: list[dict], options: dict[str, str]) -> list[str]:
    """Chosen configurations of bench runs replayed on another machine's cost curve."""
    keys = [k.split(",") for k in _names(options, "keys", results)]
    body = []
    for result, run, wanted in zip(results, _names(options, "runs", results), keys, strict=True):
        rows = {r["key"]: r for r in result["projection"]["rows"]}
        for key in wanted:
            r = rows[key]
            tau, free = f"{r['tau']:.2f}", f"{r['projected_drafter_free']:.2f}x"
            body.append([r["config"], f"`{run}`", tau, free])
    return markdown_table(["config", "run", "tau", "projection (drafter free)"], body)


def _kernels(results: list[dict], options: dict[str, str]) -> list[str]:
    """A model per file: extra buffer types on and off, up to which B batched rows are exact,
    and the cost curve of the configuration the check chose."""
    labels = [r["kernels"]["model"] for r in results]
    if "labels" in options:
        labels = _names(options, "labels", results)
    sizes = (2, 4, 8, 16, 32)
    head = ["model", "extra buffer types on", "off: exact up to", "T(1) ms"]
    head += [f"T({b})/T(1)" for b in sizes]
    body = []
    for label, result in zip(labels, results, strict=True):
        checks = {r["config"]["extra_bufts"]: r for r in result["kernels"]["verdict"]["results"]}
        on, off = checks[True], checks[False]
        upto = off["exact_upto"]
        exact = f"every B ({upto})" if upto >= off["checked_rows"] else f"B={upto}"
        t = {int(b): ms for b, ms in off["decode_ms"].items()}
        cells = [label, on["outcome"] + (f" ({on['detail']})" if on["detail"] else ""), exact]
        body.append([*cells, f"{t[1]:.1f}", *(f"{t[b] / t[1]:.2f}" for b in sizes)])
    return markdown_table(head, body)


def _generate_runs(results: list[dict], options: dict[str, str]) -> list[str]:
    """`hyflash generate --json` runs against the first file, plain decoding's answer."""
    plain, runs = results[0], results[1:]
    labels = _names(options, "labels", runs)
    head = [
        "run",
        "tokens equal to plain",
        "tau",
        f"tok/s (plain {plain['stats']['tokens_per_s']:.1f})",
    ]
    body = []
    for label, r in zip(labels, runs, strict=True):
        a, b = plain["tokens"], r["tokens"]
        same = next(
            (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
        )
        equal = f"all {same}" if same == len(a) == len(b) else f"first {same}"
        stats = r["stats"]
        body.append([label, equal, f"{stats['tau_mean']:.2f}", f"{stats['tokens_per_s']:.1f}"])
    return markdown_table(head, body)


def _validation(results: list[dict | list], options: dict[str, str]) -> list[str]:
    """Validation tau estimate / slot-1 accuracy at chosen steps: a run's history (a list of
    logged steps) or a drafter's card (its best checkpoint's step only)."""
    steps = [int(s) for s in options["steps"].split(",")]
    body = []
    for label, result in zip(_names(options, "labels", results), results, strict=True):
        if isinstance(result, dict):  # a card: the kept checkpoint's metrics
            m = result["metrics"]
            at = {m["steps"]: (m["val_tau_estimate"], m["val_slot_accuracy"][0])}
        else:
            at = {
                r["step"]: (r["val"]["tau_estimate"], r["val"]["slot_accuracy"][0])
                for r in result
                if "val" in r
            }
        cells = [f"{at[s][0]:.2f} / {at[s][1]:.2f}" if s in at else "" for s in steps]
        body.append([label, *cells])
    return markdown_table(["step", *(f"{s:,}" for s in steps)], body)


def _app_speed(results: list[dict], options: dict[str, str]) -> list[str]:
    """Runs side by side (runs="before|after"), or pooled into one (pooled=yes: each row
    sums every run's answers of its kind and configuration)."""
    if options.get("pooled") == "yes":
        return app_speed_table([(None, pooled_app_speed_rows(results))])
    if "runs" in options:
        names = _names(options, "runs", results)
        return app_speed_table(list(zip(names, (r["rows"] for r in results), strict=True)))
    return app_speed_table([(None, r["rows"]) for r in results])


RENDERERS: dict[str, Callable[[list[dict], dict[str, str]], list[str]]] = {
    "speed": lambda results, options: summary_table(_one(results, "speed")),
    "speed-runs": _speed_runs,
    "speed-cost-curve": lambda results, options: cost_curve_table(_one(results, "speed")),
    "drafter-time": lambda results, options: time_table(_one(results, "drafter-time")),
    "acceptance": _acceptance,
    "speedup-costs": _speedup_costs,
    "speedup-stages": _speedup_stages,
    "projection": _projection,
    "app-speed": _app_speed,
    "app-render": lambda results, options: render_cost_table(results),
    "kernels": _kernels,
    "generate-runs": _generate_runs,
    "validation": _validation,
    "torch-check": lambda results, options: torch_check_table(_one(results, "torch-check")),
    "vocab-coverage": lambda results, options: coverage_table(_one(results, "vocab-coverage")),
}


# ----- command ----------------------------------------------------------------------------------


def cmd_render(args: argparse.Namespace) -> int:
    path = Path(args.file)
    text = path.read_text(encoding="utf-8")
    try:
        new, changed = render_text(text, Path(args.root))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    found = len(tables(text))
    if args.check:
        for t in changed:
            print(f"{path}: table differs from its raw files: {t.name}", file=sys.stderr)
        if not changed:
            print(f"{path}: {found} generated tables match their raw files")
        return 1 if changed else 0
    if new != text:
        path.write_text(new, encoding="utf-8")
    print(f"{path}: {found} tables rendered, {len(changed)} changed")
    for t in changed:
        print(f"  {t.name}")
    return 0


def add_parser(sub) -> None:
    results = sub.add_parser("results", help="the tables of docs/RESULTS.md from raw files")
    inner = results.add_subparsers(dest="results_command", required=True)
    p = inner.add_parser("render", help="rewrite every marked table from its raw files")
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs")
    p.add_argument("--file", default=str(RESULTS), help="the Markdown file (default: RESULTS.md)")
    p.add_argument("--root", default=str(REPO), help="where raw file paths start")
    p.set_defaults(func=cmd_render)
