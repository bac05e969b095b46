"""What every named transform is: options read from ``TrainConfig`` fields, a rewrite of a corpus's pairs before
training (``prepare``) and a practice corpus made from the training corpora (``practice``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from training.corpora import Corpus


def setting(config_field: str, default: Any) -> Any:
    """A field of a transform's options dataclass, read from ``TrainConfig.<config_field>`` (also its flag,
    ``--config-field``)."""
    return dataclasses.field(default=default, metadata={"config_field": config_field})


@dataclass
class Practice:
    """What a practice corpus is made from, once the training corpora have their entity swappers."""

    corpora: list[tuple[Corpus, Any]]  # each training corpus and its swapper (None without --entity-swap)
    swap: float  # the entity swap probability of the corpora (--entity-swap; 0: no swapping)
    seed: int  # the run's seed: a practice corpus's swapper draws from seed + its transform's ``seed_offset``
    dates: bool  # the corpora's dates are redrawn (--entity-dates)
    british: float  # the corpora's share of British-spelled pairs (--british-spelling)
    names: frozenset[str]  # the words the corpora's swappers count as names
    swapper: Callable[..., Any] | None  # EntitySwapper(pairs, pools, p, seed=..., ...) with the run's pools bound


class Transform:
    """A named augmentation. Subclasses set ``name`` (its key in ``training.transforms.TRANSFORMS``), ``Options`` (a
    frozen dataclass whose fields are ``setting``s) and ``seed_offset``, and override ``prepare`` and/or
    ``practice``."""

    name: ClassVar[str]
    Options: ClassVar[type]
    seed_offset: ClassVar[int] = 0

    def __init__(self, options: Any):
        self.options = options

    @classmethod
    def from_config(cls, config: Any) -> Transform:
        """This transform with its options read from a ``TrainConfig``."""
        return cls(cls.Options(**{f.name: getattr(config, f.metadata["config_field"]) for f in dataclasses.fields(cls.Options)}))

    @classmethod
    def config_fields(cls, options: dict[str, Any]) -> dict[str, Any]:
        """``{TrainConfig field: value}`` for a TOML table of this transform's options. Raises KeyError naming an
        option it does not have."""
        by_name = {f.name: f.metadata["config_field"] for f in dataclasses.fields(cls.Options)}
        for key in options:
            if key not in by_name:
                raise KeyError(key)
        return {by_name[k]: v for k, v in options.items()}

    def prepare(self, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The training pairs of one corpus as this transform leaves them before training (default: unchanged)."""
        return pairs

    def practice(self, context: Practice) -> tuple[Corpus, Any] | None:
        """One more training corpus and its swapper (None when nothing swaps), or None (the default): nothing to add."""
        return None
