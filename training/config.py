"""Training options as data: ``TrainConfig``, read from a TOML file, flags on top.

    python -m training.train --config stage.toml                  # every option from the file
    python -m training.train --config stage.toml --lr 3e-4 --out DIR   # a flag overrides the file's value

A TOML file holds ``TrainConfig``'s fields by name (``lr = 3e-4``, ``corpus = ["multi30k:1.0", "tatoeba:2.0"]``) and
may give a transform's options as a table under its registered name (``training.transforms.TRANSFORMS``)::

    [transforms.entities]
    p = 0.7
    splice = 0.3

which is the same as ``entity_swap = 0.7`` and ``entity_splice = 0.3``. An unknown key is refused, named.
The flags are the fields' names with dashes (``--entity-swap``); every flag train.py took before takes the same
values now, so older commands still run.
"""

from __future__ import annotations

import argparse
import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.transforms import fields_of

RUN_ONLY = ("resume", "quiet")  # how one run behaves, not what it trains: not recorded in metrics.json's args


def option(default: Any, help: str = "", **argparse_kwargs: Any) -> Any:
    """A dataclass field of ``TrainConfig`` whose flag takes ``argparse_kwargs`` (``metavar``, ``choices``...)."""
    return field(default=default, metadata={"help": help, **argparse_kwargs})


@dataclass(frozen=True)
class TrainConfig:
    """Every option of ``python -m training.train``: what to read, the architecture, the optimisation, the
    augmentation (``training.transforms``) and how the run is kept. Frozen; ``__post_init__`` checks each value
    and raises ValueError naming the option. Sizes are in tokens or model units, times in minutes."""

    # -- data --
    task: str = option(
        "translate", "what to learn: translation, or the synthetic reversal task", choices=["translate", "reverse"]
    )
    data: str | None = option(
        None, "folder with {train,val}.{SRC,TGT}[.gz] (Multi30k raw); default: $MULTI30K_DIR or ../shared/data/multi30k"
    )
    corpus: tuple[str, ...] = option(
        (),
        "train on this corpus (a folder under the data root); WEIGHT (default 1) is how many times each epoch samples "
        "it, fractions taking a fresh random share each epoch; repeat for a mix",
        action="append",
        metavar="NAME[:WEIGHT]",
    )
    val_corpus: tuple[str, ...] | None = option(
        None,
        "validate on this corpus's dev (or val) split; repeat for a dev mix (default: multi30k and tatoeba, those of "
        "them trained on, else every --corpus)",
        action="append",
        metavar="NAME",
    )
    data_root: str | None = option(None, "folder of corpus folders (default: $ATTN_DATA_ROOT or ../shared/data)")
    src_lang: str = option("en", "source language: the file suffix of the source side")
    tgt_lang: str = option("de", "target language: the file suffix of the target side")
    train_src: str | None = option(None, "a training source file, aligned line by line with --train-tgt")
    train_tgt: str | None = option(None, "the training target file of --train-src")
    val_src: str | None = option(None, "a validation source file (default with --train-src: its last 500 pairs)")
    val_tgt: str | None = option(None, "the validation target file of --val-src")
    out: str | None = option(None, "the checkpoint folder written (required)")
    train_size: int = option(20000, "reverse task: training pairs")
    # -- vocabulary --
    min_freq: int = option(2, "keep cl100k pieces seen this often")
    tgt_min_freq: int | None = option(
        None, "give the decoder its own vocabulary: target pieces seen this often (default: the shared one)"
    )
    # -- architecture (ignored with --init-from, which keeps that checkpoint's) --
    d_model: int = option(256, "model width")
    n_heads: int = option(4, "attention heads per layer")
    d_ff: int = option(1024, "width of the feed-forward layer")
    n_enc_layers: int = option(3, "encoder layers")
    n_dec_layers: int = option(3, "decoder layers")
    dropout: float = option(0.1, "dropout probability (residual, attention, embeddings)")
    max_len: int = option(128, "longest sequence in tokens; longer training pairs are dropped")
    post_ln: bool = option(False, "the paper's post-LN instead of pre-LN", action="store_true")
    no_tie: bool = option(False, "separate source, target and output embeddings", action="store_true")
    pos_encoding: str = option("sinusoidal", "position encoding", choices=["sinusoidal", "learned"])
    # -- optimisation --
    epochs: int = option(30, "epochs at most")
    max_minutes: float | None = option(None, "stop after this much training time")
    max_tokens: int = option(4096, "padded src+tgt tokens per batch")
    lr: float = option(1e-3, "peak learning rate")
    warmup: int = option(800, "warm-up steps")
    schedule: str = option("cosine", "decay after warm-up", choices=["inverse_sqrt", "cosine"])
    weight_decay: float = option(0.01, "AdamW weight decay of the matrices")
    label_smoothing: float = option(0.1, "label smoothing of the cross-entropy (paper 5.4)")
    clip: float = option(1.0, "gradient norm clip")
    ema: float = option(0.999, "EMA decay of the weights (0 turns it off)")
    seed: int = option(1234, "seed of the weights, the batches and every augmentation draw")
    # -- how the run is kept --
    save_minutes: float = option(5.0, "write the training state this often (minutes)")
    val_limit: int | None = option(None, "evaluate on the first N validation pairs")
    bleu_after: float = option(
        0.0,
        "with --max-minutes: compute validation BLEU only once this share of the budget is used (loss every epoch)",
    )
    threads: int | None = option(None, "CPU threads of torch (default: torch's)")
    device: str | None = option(None, "cpu, cuda, cuda:1, mps (default: the best there is)")
    bf16: bool | None = option(
        None,
        "bfloat16 autocast for training (default: on where the CPU/GPU supports it)",
        action=argparse.BooleanOptionalAction,
    )
    cudnn_attention: bool = option(
        False,
        "let F.scaled_dot_product_attention pick cuDNN on a GPU (default off: with our masks and batch shapes that "
        "change every step it spent ~22 ms of host time per call building plans; bench/README.md, benchmark 10)",
        action=argparse.BooleanOptionalAction,
    )
    resume: bool = option(False, "continue from OUT/state", action="store_true")
    init_from: str | None = option(
        None,
        "start from this checkpoint's weights (a later training stage): its architecture, the vocabulary rebuilt from "
        "this stage's data with embedding rows copied by cl100k piece, a fresh optimizer, --warmup steps of warm-up "
        "and cosine decay to zero at the stage's --max-minutes",
        metavar="DIR",
    )
    keep_vocab: bool = option(False, "with --init-from: keep that checkpoint's vocabulary (a later stage)", action="store_true")
    # -- augmentation: training.transforms (entities, clock, dates, negation, spelling) --
    entity_corpus: float = option(
        0.0,
        "with --entity-swap: add every training pair that shares a name, place or number as one more corpus of weight W, "
        "swapped every time it is drawn (copy practice)",
        metavar="W",
    )
    entity_swap: float = option(
        0.0,
        "each epoch, replace the names, places and numbers a training pair shares verbatim on both sides by random ones "
        "(Faker's names and cities, numbers of the same shape) with probability P (training.transforms.entities)",
        metavar="P",
    )
    entity_splice: float = option(
        0.0,
        "with --entity-swap: this share of the one-word Latin names drawn is two pool names joined (copy practice on "
        "piece sequences no list holds)",
        metavar="S",
    )
    entity_full_name: float = option(
        0.0, "with --entity-swap: this share of the first names drawn is followed by a surname (two-word names)", metavar="F"
    )
    entity_years: float = option(
        0.0,
        "with --entity-swap: this share of the whole numbers swapped becomes a year (1900-2039), whatever its length",
        metavar="Y",
    )
    entity_long_numbers: float = option(
        0.0,
        "with --entity-swap: this share of the whole numbers swapped becomes a long number, as a phone number or postcode "
        "is typed (5-9 digits, or 2-3 groups of 2-5: '0176 55512'; training.transforms.numbers.random_long_number)",
        metavar="L",
    )
    entity_digit_repeats: float = option(
        0.0,
        "with --entity-long-numbers: the chance that a digit of a long number repeats the one before, so that runs of "
        "equal digits are practised ('5552227'; training.transforms.numbers.random_long_number)",
        metavar="R",
    )
    entity_grouped_numbers: float = option(
        0.0,
        "with --entity-swap: this share of the whole numbers swapped becomes a large or decimal number, English "
        "'3,700,000' / '3.5', German '3.700.000' / '3,5' (training.transforms.numbers.random_grouped_number); any G > 0 "
        "also swaps the corpora's grouped and decimal numbers, the German side written with German separators",
        metavar="G",
    )
    entity_piece_names: float = option(
        0.0,
        "with --entity-swap and --init-from: this share of the one-word names drawn is 2-3 random word pieces of the "
        'vocabulary joined and capitalised ("A"+"yes"+"ha"): names whose pieces are English words are copied',
        metavar="Q",
    )
    entity_piece_heads: float = option(
        0.0,
        "with --entity-piece-names: this share of the piece names begins with a capitalised piece of the vocabulary "
        '("Tim", "Raj") and 0-2 word pieces: names that are one rare piece are practised as targets',
        metavar="H",
    )
    times_as_typed: bool = option(
        False,
        'write a training pair\'s German clock time as its English types it ("2.30 Uhr", "halb drei" -> "2:30 Uhr", '
        '"2:30"; 218 pairs), so that no pair teaches turning a typed time into another form '
        "(training.transforms.clock.times_as_typed)",
        action="store_true",
    )
    drop_context_times: bool = option(
        False,
        "leave out training pairs whose German side writes an English clock time 12 hours later with no afternoon or "
        "evening word in the English (BConTrasT's chats: the conversation decided), and with --entity-swap swap the "
        "other such pairs' times together (training.transforms.clock.later_times)",
        action="store_true",
    )
    entity_dates: bool = option(
        False,
        'with --entity-swap: an English date that the German writes as a date ("May 5th" / "5. Mai") gets a random day '
        "and month on both sides, the English in any of its four forms (training.transforms.dates.shared_dates), and "
        '"in May" / "im Mai" becomes a random date (training.transforms.dates.shared_months)',
        action="store_true",
    )
    date_corpus: int = option(
        0,
        'with --entity-swap and --entity-dates: every training pair with a date or with "in May" / "im Mai" N more times '
        'an epoch, each copy with its own random date ("on 3 May 2003" / "am 3. Mai 2003"; '
        "training.transforms.dates.months_to_dates): date practice",
        metavar="N",
    )
    entity_clock_words: float = option(
        0.0,
        "with --entity-swap: this share of the clock times swapped is written in words on both sides ('half past seven' "
        "/ 'halb acht', 'quarter to eight' / 'Viertel vor acht'; training.transforms.clock.random_clock_words)",
        metavar="W",
    )
    british_spelling: float = option(
        0.0,
        "with --entity-swap: this share of the pairs whose English holds an American spelling ('color', 'meters') gets "
        "it spelled the British way each epoch ('colour', 'metres'; training.transforms.spelling, breame's list)",
        metavar="B",
    )
    british_corpus: int = option(
        0,
        "with --entity-swap: every training pair whose English holds an American spelling N more times an epoch, "
        "spelled the British way, names swapped as in the corpora",
        metavar="N",
    )
    negation_corpus: int = option(
        0,
        'every training pair whose English negates and whose German puts "nicht" after a definite or possessive object '
        '("Der Hund fraß das Fleisch nicht."; training.transforms.negation.nicht_after_object) N more times an epoch: '
        'negation practice against affirmative collocations ("überquerte die Straße."); names swapped as in the corpora',
        metavar="N",
    )
    # -- the machine --
    prefetch: bool = option(
        False,
        "make each next epoch's swapped examples and batches in a forked worker while this one trains (for a GPU, whose "
        "steps outpace the few seconds this takes; on a busy CPU it competes with training)",
        action="store_true",
    )
    profile_steps: int = option(
        0,
        "profile N training steps after the first 10 (torch.profiler, host and GPU) into OUT/profile.txt: where a "
        "step's time goes",
        metavar="N",
    )
    quiet: bool = option(False, "no progress bar", action="store_true")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # TOML arrays and argparse lists become tuples: the config stays frozen
            value = getattr(self, f.name)
            if isinstance(value, list):
                object.__setattr__(self, f.name, tuple(value))
        problems = list(self._problems())
        if problems:
            raise ValueError("; ".join(problems))

    def _problems(self):
        for f in dataclasses.fields(self):
            value, choices = getattr(self, f.name), f.metadata.get("choices")
            if choices and value not in choices:
                yield f"{f.name} must be one of {choices}, got {value!r}"
        positive = ("train_size", "min_freq", "d_model", "n_heads", "d_ff", "n_enc_layers", "n_dec_layers", "max_len")
        positive += ("epochs", "max_tokens", "lr", "save_minutes")
        yield from (f"{n} must be > 0, got {getattr(self, n)}" for n in positive if not getattr(self, n) > 0)
        for name in ("tgt_min_freq", "max_minutes", "val_limit", "threads"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                yield f"{name} must be > 0, got {getattr(self, name)}"
        if self.d_model % self.n_heads:
            yield f"d_model {self.d_model} must be a multiple of n_heads {self.n_heads}"
        shares = ("dropout", "label_smoothing", "ema", "bleu_after", "entity_swap", "entity_splice", "entity_full_name")
        shares += ("entity_years", "entity_long_numbers", "entity_digit_repeats", "entity_grouped_numbers")
        shares += ("entity_piece_names", "entity_piece_heads", "entity_clock_words", "british_spelling")
        yield from (f"{n} must be in [0, 1], got {getattr(self, n)}" for n in shares if not 0 <= getattr(self, n) <= 1)
        counts = ("warmup", "weight_decay", "clip", "entity_corpus", "date_corpus", "british_corpus", "negation_corpus")
        yield from (f"{n} must be >= 0, got {getattr(self, n)}" for n in counts + ("profile_steps",) if getattr(self, n) < 0)
        if bool(self.train_src) != bool(self.train_tgt):
            yield "train_src and train_tgt go together"
        if self.date_corpus and not (self.entity_dates and self.entity_swap > 0):
            yield "--date-corpus needs --entity-swap and --entity-dates (the dates it practises are theirs)"
        if (self.british_spelling or self.british_corpus) and self.entity_swap <= 0:
            yield "--british-spelling and --british-corpus need --entity-swap (the entity swapper spells them)"

    @classmethod
    def from_dict(cls, values: dict[str, Any], *, source: str = "the config") -> TrainConfig:
        """A config from field values, with ``transforms.NAME`` tables unfolded into fields
        (``training.transforms.fields_of``). Raises ValueError naming every unknown key, or a bad value."""
        return cls(**flatten(values, source=source))

    @classmethod
    def from_toml(cls, path: str | Path) -> TrainConfig:
        """The config a TOML file describes (missing keys keep their defaults). Raises ValueError naming each unknown
        key or a bad value, tomllib.TOMLDecodeError for a file that is not TOML."""
        with open(path, "rb") as f:
            return cls.from_dict(tomllib.load(f), source=str(path))

    def to_dict(self, *, run_options: bool = True) -> dict[str, Any]:
        """The fields as plain values (tuples as lists), as metrics.json records them; ``run_options=False`` leaves
        out ``RUN_ONLY``."""
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}
        return out if run_options else {k: v for k, v in out.items() if k not in RUN_ONLY}

    def to_args(self) -> list[str]:
        """The flags of ``python -m training.train`` that give this config (defaults left out)."""
        args: list[str] = []
        for f in dataclasses.fields(self):
            value, flag = getattr(self, f.name), "--" + f.name.replace("_", "-")
            if value == f.default:
                continue
            if f.metadata.get("action") == "append":
                args += [a for v in value for a in (flag, str(v))]
            elif f.metadata.get("action") == "store_true":
                args.append(flag)
            elif f.metadata.get("action") is argparse.BooleanOptionalAction:
                args.append(flag if value else "--no-" + flag[2:])
            else:
                args += [flag, _number_text(value)]
        return args


def _number_text(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


FIELDS = frozenset(f.name for f in dataclasses.fields(TrainConfig))


def flatten(values: dict[str, Any], *, source: str = "the config") -> dict[str, Any]:
    """``values`` with its ``transforms`` table (``{NAME: {option: value}}``) unfolded into ``TrainConfig`` fields.
    Raises ValueError naming each key that is neither a field nor a registered transform's option."""
    values = dict(values)
    out: dict[str, Any] = {}
    unknown = [k for k in values if k not in FIELDS and k != "transforms"]
    for name, options in values.pop("transforms", {}).items():
        try:
            out.update(fields_of(name, options))
        except KeyError as e:
            unknown.append(f"transforms.{name}" + (f".{e.args[0]}" if e.args and e.args[0] != name else ""))
    if unknown:
        raise ValueError(f"{source}: unknown key(s) {', '.join(sorted(unknown))}")
    clash = sorted(k for k in out if k in values)
    if clash:
        raise ValueError(f"{source}: {', '.join(clash)} given both as a field and in a transforms table")
    return {**values, **out}


def parser(description: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of ``python -m training.train``: ``--config FILE`` and one flag per ``TrainConfig`` field,
    each defaulting to "not given" so that only the flags typed override the file."""
    ap = argparse.ArgumentParser(
        prog="python -m training.train",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        argument_default=argparse.SUPPRESS,
    )
    ap.add_argument("--config", metavar="FILE.toml", help="read the options from this TOML file; flags override it")
    for f in dataclasses.fields(TrainConfig):
        kwargs = {k: v for k, v in f.metadata.items() if k != "help"}
        default = f.default if f.default is not None else "none"
        help_text = f.metadata["help"] + ("" if kwargs.get("action") else f" (default: {default})")
        if f.type in ("int", "int | None") and "action" not in kwargs:
            kwargs["type"] = int
        elif f.type in ("float", "float | None") and "action" not in kwargs:
            kwargs["type"] = float
        ap.add_argument("--" + f.name.replace("_", "-"), help=help_text.replace("%", "%%"), **kwargs)
    return ap


def parse_config(argv: list[str] | None = None, description: str | None = None) -> TrainConfig:
    """``TrainConfig`` from the command line: the ``--config`` file's values, then the flags given. Exits (argparse's
    usage error, status 2) for an unknown flag or key, a bad value or a missing ``--out``."""
    ap = parser(description)
    given = vars(ap.parse_args(argv))
    path = given.pop("config", None)
    try:
        values = {}
        if path is not None:
            with open(path, "rb") as f:
                values = flatten(tomllib.load(f), source=path)
        for name in ("corpus", "val_corpus"):  # a repeated flag replaces the file's list, not adds to it
            if name in given:
                values.pop(name, None)
        config = TrainConfig(**{**values, **given})
    except (ValueError, OSError, tomllib.TOMLDecodeError) as e:
        ap.error(str(e))
    if not config.out:
        ap.error("--out is required (a flag or out = ... in the config file)")
    return config
