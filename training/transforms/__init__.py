"""Data augmentation as named transforms (OpenNMT-py / fairseq style), each with its own options dataclass:

- ``clock``: clock times (leave out pairs moved 12 hours with no cue, write German times as typed, times in words);
- ``entities``: names, places and numbers shared on both sides swapped each epoch, and copy practice;
- ``dates``: dates redrawn on both sides, "in May" made a date, and date practice;
- ``negation``: negation practice ("nicht" after a definite object);
- ``spelling``: British spelling of the English side, and spelling practice.

``TRANSFORMS`` registers each once by name; ``prepare`` and ``augment`` apply them in that order (the order fixes
every random draw, so a run is repeatable). In a TOML config a transform's options are a table,
``[transforms.entities] p = 0.7``; each option is also a ``TrainConfig`` field and a flag (``--entity-swap 0.7``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from training.corpora import Corpus
from training.transforms.base import Practice, Transform
from training.transforms.clock import Clock
from training.transforms.dates import Dates
from training.transforms.entities import Entities
from training.transforms.negation import Negation
from training.transforms.spelling import Spelling
from training.transforms.swapper import EntitySwapper

TRANSFORMS: dict[str, type[Transform]] = {t.name: t for t in (Clock, Entities, Dates, Negation, Spelling)}


def fields_of(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """``TrainConfig`` fields for transform ``name``'s TOML table. Raises KeyError naming an unknown transform
    (``name``) or option."""
    return TRANSFORMS[name].config_fields(options)


def transforms_of(config: Any) -> dict[str, Transform]:
    """Every registered transform, by name, with its options read from a ``TrainConfig``."""
    return {name: cls.from_config(config) for name, cls in TRANSFORMS.items()}


def active(config: Any) -> dict[str, dict[str, Any]]:
    """The options of each transform that changes anything under ``config`` (an option off its default), by name."""
    out = {}
    for name, t in transforms_of(config).items():
        fields = t.Options.__dataclass_fields__.values()
        changed = {f.name: getattr(t.options, f.name) for f in fields if getattr(t.options, f.name) != f.default}
        if changed:
            out[name] = changed
    return out


def prepare(config: Any, corpora: list[Corpus]) -> list[Corpus]:
    """The training corpora as the transforms leave them before training (``Transform.prepare``, in order)."""
    for t in transforms_of(config).values():
        corpora = [Corpus(c.name, t.prepare(c.pairs), c.weight) for c in corpora]
    return corpora


@dataclass
class Augmented:
    """The training corpora with the practice corpora added, one ``EntitySwapper`` per corpus (or none at all), and
    one epoch's swapped pairs, which the vocabulary counts too (so that name pieces get target ids)."""

    corpora: list[Corpus]
    swappers: list[EntitySwapper]
    vocab_pairs: list[tuple[str, str]]


def augment(config: Any, corpora: list[Corpus], piece_texts: Callable[[], list[str]]) -> Augmented:
    """Entity swappers for the training corpora and each transform's practice corpus (``Transform.practice``, in
    registry order, their swappers seeded ``config.seed`` + the transform's ``seed_offset``). ``piece_texts``: the
    vocabulary's piece texts, called only for ``--entity-piece-names``."""
    ts = transforms_of(config)
    entities, dates, spelling = ts["entities"].options, ts["dates"].options, ts["spelling"].options
    corpora = list(corpora)
    context = Practice([(c, None) for c in corpora], entities.p, config.seed, dates.swap, spelling.british, frozenset(), None)
    if entities.p <= 0:  # only negation practice works without swapping
        extra = [got for t in ts.values() if (got := t.practice(context))]
        return Augmented(corpora + [c for c, _ in extra], [], [])
    pools = ts["entities"].pools(config.seed, piece_texts() if entities.piece_names else [], ts["clock"].options.words)
    swappers = [
        EntitySwapper(
            c.pairs, pools, entities.p, seed=config.seed, later=ts["clock"].options.drop_context_times,
            dates=dates.swap, british=spelling.british,
        )
        for c in corpora
    ]  # fmt: skip
    context.corpora = list(zip(corpora, swappers, strict=True))
    context.names = frozenset().union(*(sw.names for sw in swappers))  # practice copies: the corpora's names
    context.swapper = lambda pairs, p, **options: EntitySwapper(pairs, pools, p, **options)
    for t in ts.values():
        if got := t.practice(context):
            corpora.append(got[0])
            swappers.append(got[1])
    return Augmented(corpora, swappers, [p for sw in swappers for p in sw.swapped(0).values()])
