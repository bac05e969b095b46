"""How to decode, as frozen settings that the app's caches, the pages and the model share, free of torch.

- ``SamplingSettings``: how ``model.decoding`` picks the next token when it is not forced (greedy, or
  sampling with temperature, top-k and top-p);
- ``DecodeSettings``: how ``analysis.analyze.analyze`` translates (greedy, beam search with its length
  penalty, or sampling), the sidebar's choice;
- ``Interventions``: the what-if tweaks of one forward pass (hidden source tokens, causal mask, ablated heads,
  temperature, window, positional encoding), which the Mask lab, Inside one head and the caches pass to the model
  (``model.transformer`` uses it, and it stays importable from there).

Importing this module never imports torch (tests/test_layering.py checks it).
"""

from __future__ import annotations

from dataclasses import dataclass

from model.facts import KINDS


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


@dataclass(frozen=True)
class Interventions:
    """What-if tweaks applied during one forward pass; the model itself is never changed.

    src_hidden:  source positions no query may attend to (a key mask in encoder
                 self-attention and cross-attention). The hidden tokens are still encoded.
    causal:      the decoder's causal mask (section 3.2.3). False lets every target query see
                 the whole target, including the future (what the model was never trained on).
    ablate:      a set of (kind, layer, head) whose output is replaced by zeros before the
                 output projection W^O. kind is one of ``KINDS``; layer and head count from 0.
    temperature: tau in softmax(Q K^T / (sqrt(d_head) * tau)); tau > 1 flattens, < 1 sharpens.
    window:      if set, self-attention (encoder and decoder) only sees keys with
                 |query - key| < window (a local band); cross-attention is unaffected.
    use_pos_encoding: False drops the positional encoding: the encoder becomes permutation
                 equivariant (section 3.5 explains why the model needs it).

    A query row whose every key is masked (e.g. every source token hidden) attends to nothing:
    its attention weights are all 0 and its attention output is the zero vector, so the
    residual stream passes it through unchanged. It never yields NaN.
    """

    src_hidden: frozenset[int] = frozenset()
    causal: bool = True
    ablate: frozenset[tuple[str, int, int]] = frozenset()
    temperature: float = 1.0
    window: int | None = None
    use_pos_encoding: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "src_hidden", frozenset(int(i) for i in self.src_hidden))
        object.__setattr__(self, "ablate", frozenset((str(k), int(l), int(h)) for k, l, h in self.ablate))
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.window is not None and self.window < 1:
            raise ValueError(f"window must be >= 1 or None, got {self.window}")
        for kind, _, _ in self.ablate:
            if kind not in KINDS:
                raise ValueError(f"ablate kind must be one of {KINDS}, got {kind!r}")

    def head_mask(self, kind: str, layer: int, n_heads: int) -> list[float] | None:
        """1.0 per kept head, 0.0 per ablated head of (kind, layer); None if none is ablated."""
        off = {h for k, l, h in self.ablate if k == kind and l == layer}
        return None if not off else [0.0 if h in off else 1.0 for h in range(n_heads)]


NO_INTERVENTIONS = Interventions()
