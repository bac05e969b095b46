"""Replay a checkpoint's lineage: ``python -m training.recipe pretrained/reverse --out DIR`` (``--dry-run`` prints the
commands instead of running them).

A checkpoint folder's ``recipe.toml`` lists the steps that made its weights, in order, each a ``[[step]]`` table:

- ``kind = "train"``: ``python -m training.train`` with the ``[step.config]`` table (``training.config.TrainConfig``
  fields; transform options as ``[step.config.transforms.NAME]`` tables; ``init_from`` a path or an earlier step's
  folder, ``"{out}/NAME"``). Its output folder is ``OUT/NAME``.
- ``kind = "average"``: ``python -m model.checkpoint average`` of ``members`` (earlier steps' names; a name given twice
  counts twice, for a weighted mean), the paper's checkpoint averaging (section 6.1).
- ``kind = "distill"``: ``python -m training.distill`` (the ``teacher`` step's beam translations of every ``every``-th
  training pair of ``corpus``, in ``shards`` processes, then ``--merge``) into the corpus folder ``OUT/data/CORPUS``;
  the other corpora of the data root are linked beside it, so that a later step reads them all with
  ``data_root = "{out}/data"``.

Every step also records where and how long it ran (``ran_on``, ``minutes``) and may carry a ``note``. In string
values, ``{out}`` is the replay's output folder and ``{data_root}`` the data root (``--data-root``, else
``training.corpora.data_root()``). ``result`` names the step whose folder holds the checkpoint's weights.

A replay is exact where every step is: a fixed seed, a fixed number of epochs (not ``max_minutes``), one thread on
the CPU. Float sums differ between CPU kernels, so the runner also pins the kernels (``REPRODUCIBLE_ENV``): torch's
own at its portable level (``ATEN_CPU_CAPABILITY=default``, not AVX2 or AVX-512) and MKL's matrix products in its
conditional-numerical-reproducibility mode (``MKL_CBWR=COMPATIBLE``), so that x86 machines of other generations add
in the same order; and ``PYTHONHASHSEED`` (Faker's name pools depend on it).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from training.config import TrainConfig, flatten
from training.corpora import data_root

ROOT = Path(__file__).resolve().parent.parent  # the repository: where ``python -m training.train`` runs
KINDS = ("train", "average", "distill")
STEP_KEYS = {
    "train": {"name", "kind", "ran_on", "minutes", "note", "config"},
    "average": {"name", "kind", "ran_on", "minutes", "note", "members"},
    "distill": {"name", "kind", "ran_on", "minutes", "note", "teacher", "corpus", "out_corpus", "every", "shards", "threads"},
}
RECIPE_KEYS = {"checkpoint", "result", "note", "step"}


@dataclass(frozen=True)
class Step:
    """One step of a recipe: its name (its output folder under the replay's ``--out``), kind and what it needs."""

    name: str
    kind: str  # one of KINDS
    ran_on: str = ""  # the machine the original ran on, in words ("CPU, one thread", "H100, four runs at once")
    minutes: float | None = None  # how long the original ran (wall-clock minutes)
    note: str = ""
    config: dict[str, Any] = field(default_factory=dict)  # train: TrainConfig fields (``{out}`` not yet filled in)
    members: tuple[str, ...] = ()  # average: the steps averaged
    teacher: str = ""  # distill: the step (or path) whose beam translations become targets
    corpus: str = ""  # distill: the corpus distilled (a folder under the data root)
    out_corpus: str = ""  # distill: the name of the distilled corpus folder (under OUT/data)
    every: int = 1  # distill: every N-th training pair
    shards: int = 1  # distill: processes generating at once
    threads: int = 1  # distill: torch threads per process


@dataclass(frozen=True)
class Recipe:
    """A checkpoint's lineage: its steps in order and the step whose output is the checkpoint."""

    checkpoint: str
    result: str
    steps: tuple[Step, ...]
    note: str = ""

    @classmethod
    def from_toml(cls, path: str | Path) -> Recipe:
        """Read and check a recipe.toml (a folder means its ``recipe.toml``). Raises ValueError naming an unknown key
        (of the recipe, a step or a step's train config), a bad value, an unknown kind, a step named twice, or a
        reference to a step not defined before."""
        path = Path(path)
        if path.is_dir():
            path = path / "recipe.toml"
        with open(path, "rb") as f:
            raw = tomllib.load(f)
        if unknown := sorted(set(raw) - RECIPE_KEYS):
            raise ValueError(f"{path}: unknown key(s) {', '.join(unknown)}")
        steps: list[Step] = []
        for k, table in enumerate(raw.get("step", [])):
            kind = table.get("kind")
            if kind not in KINDS:
                raise ValueError(f"{path}: step {k + 1} has kind {kind!r}, not one of {KINDS}")
            if unknown := sorted(set(table) - STEP_KEYS[kind]):
                raise ValueError(f"{path}: step {table.get('name', k + 1)!r}: unknown key(s) {', '.join(unknown)}")
            step = Step(**{key: tuple(v) if isinstance(v, list) else v for key, v in table.items()})
            if step.name in {s.name for s in steps}:
                raise ValueError(f"{path}: step {step.name!r} is defined twice")
            for member in step.members + ((step.teacher,) if step.teacher else ()):
                if "/" not in member and member not in {s.name for s in steps}:
                    raise ValueError(f"{path}: step {step.name!r} uses {member!r}, which no earlier step makes")
            if kind == "train":
                train_config(step, "{out}", "{data_root}", source=f"{path}: step {step.name!r}")  # checks every key
            steps.append(step)
        recipe = cls(raw["checkpoint"], raw["result"], tuple(steps), raw.get("note", ""))
        if recipe.result not in {s.name for s in steps}:
            raise ValueError(f"{path}: result {recipe.result!r} is not a step")
        return recipe


def fill(value: Any, out: str, root: str) -> Any:
    """``value`` with ``{out}`` and ``{data_root}`` filled in (strings, and the strings of lists and tables)."""
    if isinstance(value, str):
        return value.replace("{out}", out).replace("{data_root}", root)
    if isinstance(value, list | tuple):
        return type(value)(fill(v, out, root) for v in value)
    if isinstance(value, dict):
        return {k: fill(v, out, root) for k, v in value.items()}
    return value


def train_config(step: Step, out: str, root: str, *, source: str = "the recipe") -> TrainConfig:
    """The ``TrainConfig`` of a train step, writing to ``out/NAME``. Raises ValueError for an unknown key or a bad
    value (naming them)."""
    values = flatten(fill(step.config, out, root), source=source)
    return replace(TrainConfig(**values), out=f"{out}/{step.name}", quiet=True)


def member_path(name: str, out: str) -> str:
    """An earlier step's folder (``out/NAME``), or ``name`` itself when it is a path."""
    return name if "/" in name else f"{out}/{name}"


def commands(recipe: Recipe, out: str, root: str) -> list[list[str]]:
    """The command lines that replay ``recipe`` into ``out`` (each a ``python -m ...`` argument list, ``python``
    standing for this interpreter), in order."""
    lines: list[list[str]] = []
    for step in recipe.steps:
        if step.kind == "train":
            lines.append(["python", "-m", "training.train", *train_config(step, out, root).to_args()])
        elif step.kind == "average":
            members = [member_path(m, out) for m in step.members]
            lines.append(["python", "-m", "model.checkpoint", "average", *members, "--out", f"{out}/{step.name}"])
        else:
            data = f"{out}/data"
            lines.append(["python", "-m", "training.recipe", "link-corpora", root, data])
            base = ["python", "-m", "training.distill", "--model", member_path(step.teacher, out), "--corpus", step.corpus]
            base += ["--data-root", root, "--out", f"{data}/{step.out_corpus}", "--every", str(step.every)]
            lines += [[*base, "--shard", f"{i}/{step.shards}", "--threads", str(step.threads)] for i in range(step.shards)]
            lines.append([*base, "--merge"])
    return lines


def link_corpora(root: str | Path, data: str | Path) -> None:
    """Make ``data`` a data root that holds every corpus folder of ``root`` (as links) beside the distilled ones."""
    data = Path(data)
    data.mkdir(parents=True, exist_ok=True)
    for corpus in sorted(Path(root).iterdir()):
        if corpus.is_dir() and not (data / corpus.name).exists():
            (data / corpus.name).symlink_to(corpus.resolve(), target_is_directory=True)


REPRODUCIBLE_ENV = {
    "PYTHONHASHSEED": "0",
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
"""Environment of every replayed command: the same float sums on any x86 CPU (see the module's docstring)."""


def run(lines: list[list[str]]) -> None:
    """Run each command line in order from the repository root (``python`` as this interpreter, in
    ``REPRODUCIBLE_ENV``; give absolute paths). Raises subprocess.CalledProcessError at the first that fails."""
    env = {**os.environ, **REPRODUCIBLE_ENV}
    for line in lines:
        print("+ " + shlex.join(line), flush=True)
        subprocess.run([sys.executable, *line[1:]], check=True, env=env, cwd=ROOT)


def main(argv: list[str] | None = None) -> Path | None:
    """``python -m training.recipe CHECKPOINT [--out DIR] [--dry-run]``; returns the folder of the replayed weights
    (None for a dry run)."""
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["link-corpora"]:  # a distill step's helper: python -m training.recipe link-corpora ROOT DATA
        link_corpora(*argv[1:3])
        return None
    ap = argparse.ArgumentParser(prog="python -m training.recipe", description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", help="a checkpoint folder with a recipe.toml (e.g. pretrained/reverse), or the file")
    ap.add_argument("--out", help="folder for every step's output (default: a new folder under runs/)")
    ap.add_argument("--data-root", help="folder of corpus folders (default: $ATTN_DATA_ROOT or ../shared/data)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args(argv)
    try:
        recipe = Recipe.from_toml(args.checkpoint)
    except (ValueError, OSError, tomllib.TOMLDecodeError) as e:
        ap.error(str(e))
    root = args.data_root or str(data_root() or "data")
    if args.out:
        out = args.out
    elif args.dry_run:
        out = "runs/replay"
    else:
        Path("runs").mkdir(exist_ok=True)
        out = tempfile.mkdtemp(prefix="replay-", dir="runs")
    if not args.dry_run:  # the commands run from the repository root
        out, root = str(Path(out).resolve()), str(Path(root).resolve())
    lines = commands(recipe, out, root)
    if args.dry_run:  # a shell that runs these lines replays exactly what the runner does
        print("export " + " ".join(f"{name}={value}" for name, value in REPRODUCIBLE_ENV.items()))
        print("\n".join(shlex.join(line) for line in lines))
        return None
    run(lines)
    print(f"replayed {recipe.checkpoint}: the weights are in {out}/{recipe.result}")
    return Path(out) / recipe.result


if __name__ == "__main__":
    main()
