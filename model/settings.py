"""How to decode, as frozen settings that the app's caches, the pages and the model share, free of torch.

- ``SamplingSettings``: how ``model.decoding`` picks the next token when it is not forced (greedy, or
  sampling with temperature, top-k and top-p);
- ``DecodeSettings``: how ``model.analysis.analyze`` translates (greedy, beam search with its length
  penalty, or sampling), the sidebar's choice.

Importing this module never imports torch (tests/test_layering.py checks it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingSettings:
    """How the next token is chosen when not forced.

    strategy: "greedy" (argmax) or "sample". For sampling: ``temperature`` divides the logits,
    ``top_k`` keeps the k most probable tokens (0 = all), ``top_p`` keeps the smallest set whose
    probability reaches p (nucleus sampling, Holtzman et al. 2020), ``seed`` makes it repeatable.
    """

    strategy: str = "greedy"
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.strategy not in ("greedy", "sample"):
            raise ValueError(f"strategy must be 'greedy' or 'sample', got {self.strategy!r}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")


GREEDY = SamplingSettings()


@dataclass(frozen=True)
class DecodeSettings:
    """How to translate: ``method`` "greedy", "beam" (``beam_size``, length penalty ``alpha``) or
    "sample" (``temperature``, ``top_k``, ``top_p``, ``seed``); ``max_new`` caps output tokens."""

    method: str = "greedy"
    beam_size: int = 5
    alpha: float = 1.5  # chosen on the dev mix (Multi30k val + Tatoeba dev) for pretrained/en-de, early_stop off
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    max_new: int | None = None
    early_stop: bool = False  # beam search: go on while a live hypothesis can still beat the finished ones

    def __post_init__(self) -> None:
        if self.method not in ("greedy", "beam", "sample"):
            raise ValueError(f"method must be greedy, beam or sample, got {self.method!r}")

    def sampling(self) -> SamplingSettings:
        strategy = "sample" if self.method == "sample" else "greedy"
        return SamplingSettings(strategy, self.temperature, self.top_k, self.top_p, self.seed)
