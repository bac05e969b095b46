"""The lesson's ten steps in words (ui/pages/lesson.py draws the figures): per step a title, 2–4 sentences for a class, and
the paper's equation where there is one. Kept apart from the page so that a teacher can read and edit them in
one place. ``{D}``-style fields in the text are filled with the model's numbers: V vocabulary, VT target
vocabulary, D d_model, H heads, Dh d_head, LE / LD encoder / decoder layers.
"""

from __future__ import annotations

from dataclasses import dataclass

from i18n import N_


@dataclass(frozen=True)
class LessonStep:
    """One step: ``key`` names its figure (``ui/pages/lesson.py`` ``DRAW``), ``equation`` is LaTeX or None. ``title`` and
    ``text`` are English, marked for the catalogue (``N_``): the page shows them through ``_()``."""

    key: str
    title: str
    text: str
    equation: str | None


LESSON = (
    LessonStep(
        "tokens",
        N_("Tokens and ids"),
        N_(
            "The model never sees letters or words, only numbers. Your text is cut into sub-word pieces (tiktoken's "
            "cl100k pieces, renumbered into this model's vocabulary of {V} ids) and each piece becomes its id; the "
            "encoder's input ends with the special piece `<eos>`. The decoder writes pieces of the same kind, one at a time, "
            "choosing among the {VT} pieces of its output vocabulary."
        ),
        None,
    ),
    LessonStep(
        "positions",
        N_("Embeddings and positional encoding"),
        N_(
            "Each id picks one row of an embedding matrix: a vector of d_model = {D} numbers learned in training, "
            "multiplied by √d_model (section 3.4). Attention alone does not know in which order the vectors came, so the "
            "paper adds a positional encoding to each one (section 3.5): sines and cosines whose wavelengths grow from 2π "
            "to 10000 · 2π across the dimensions. The figure shows what is added at each position of your sentence; no two "
            "rows are alike, and neighbouring rows are similar."
        ),
        r"PE_{(pos,\,2i)} = \sin\!\left(\frac{pos}{10000^{2i/d_{model}}}\right) \qquad "
        r"PE_{(pos,\,2i+1)} = \cos\!\left(\frac{pos}{10000^{2i/d_{model}}}\right)",
    ),
    LessonStep(
        "attention",
        N_("Self-attention in the encoder"),
        N_(
            "Every token makes a query q, a key k and a value v: its vector times three learned matrices. The query's dot "
            "product with every key, divided by √d_k so that large vectors do not make the softmax too sharp, gives one "
            "score per token; the softmax turns the scores into weights that are positive and sum to 1. The token's new "
            "vector is the weighted mix of the values. In the heatmap a row is one query token and the columns are the "
            "tokens it reads: every row sums to 1."
        ),
        r"\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right) V",
    ),
    LessonStep(
        "heads",
        N_("Many heads, many layers"),
        N_(
            "One attention is one way of mixing. The model runs h = {H} heads side by side, each with its own W^Q, W^K and "
            "W^V of d_k = d_model / h = {Dh} columns, joins their outputs and mixes them with W^O (section 3.2.2). A small "
            "feed-forward network then works on every position on its own (eq. 2), and the whole block is repeated: this "
            "encoder has {LE} layers. Each tile is one head of one layer for your sentence; heads often specialise, one "
            "reading the previous word, another the next or the end."
        ),
        r"\mathrm{MultiHead}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)\, W^O, \quad "
        r"\mathrm{head}_i = \mathrm{Attention}(QW_i^Q, KW_i^K, VW_i^V)",
    ),
    LessonStep(
        "causal",
        N_("The causal mask"),
        N_(
            "The decoder writes from left to right, so a position may read only itself and the pieces before it, never "
            "the ones it has yet to predict (section 3.2.3). The paper does this inside the softmax: the scores of later "
            "positions are set to −∞, so their weights become exactly 0. In training every position of the correct "
            "translation is computed at once, and the mask keeps each one from reading the answer. The grey triangle is the "
            "masked future; each row reads “decoder input → the piece it predicted”."
        ),
        r"\mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}} + M\right) V, \qquad "
        r"M_{ij} = \begin{cases} 0 & j \le i \\ -\infty & j > i \end{cases}",
    ),
    LessonStep(
        "cross",
        N_("Cross-attention"),
        N_(
            "In each of the {LD} decoder layers a second attention looks at the source. Its queries come from the decoder "
            "(the translation so far), its keys and values from the encoder's output, the memory (section 3.2.3): the "
            "same formula with Q from one sentence and K, V from the other. Each row shows where the model looks in the "
            "source while it chooses the next piece; it often resembles a word alignment, but it does not have to."
        ),
        r"\mathrm{softmax}\!\left(\frac{Q_{\text{decoder}}\, K_{\text{encoder}}^\top}{\sqrt{d_k}}\right) V_{\text{encoder}}",
    ),
    LessonStep(
        "next_token",
        N_("One decoding step"),
        N_(
            "At each step the decoder's last vector h_t is multiplied by the output matrix, giving one score (a logit) for "
            "each of the {VT} pieces it can write, and a softmax turns the scores into probabilities (section 3.4; here "
            "the output matrix is the embedding matrix itself, shared as in the paper). The bars are the most probable "
            "next pieces at the step you pick. The chosen piece is appended to the decoder's input and the loop runs again, "
            "until the model writes `<eos>`."
        ),
        r"P(y_t = w \mid y_{<t}, x) = \mathrm{softmax}\!\left(h_t W_{\text{out}}\right)_w",
    ),
    LessonStep(
        "beam",
        N_("Greedy and beam search"),
        N_(
            "Greedy decoding takes the most probable piece at every step: fast, but a piece that looks best now can lead "
            "to a worse sentence. Beam search keeps the k best partial translations at every step and in the end picks "
            "the one with the best total log-probability, divided by a length penalty so that short outputs are not "
            "favoured (the paper used k = 4 and α = 0.6, section 6.1). The tree shows every hypothesis the beam kept."
        ),
        r"\mathrm{score}(Y) = \frac{\log P(Y \mid X)}{\left((5 + |Y|)/6\right)^{\alpha}}",
    ),
    LessonStep(
        "masking",
        N_("Masking experiments"),
        N_(
            "Masks also let you ask the model questions. Hide one source token: no query may attend to it any more (its "
            "score becomes −∞ in the encoder's self-attention and in cross-attention), and nothing is retrained. If the "
            "translation changes, the model needed that token there; the changed pieces are marked. The Mask lab page has "
            "more experiments: the causal mask off, a local window, a temperature, heads switched off."
        ),
        r"\mathrm{score}_{ij} = -\infty \ \text{for the hidden token } j \;\Rightarrow\; \mathrm{weight}_{ij} = 0",
    ),
    LessonStep(
        "explain",
        N_("Is attention an explanation?"),
        N_(
            "A large weight is easily read as “the model used this word”, but a weight only says how much a query weighs a "
            "token. Each token adds the vector α·f(x) to the output, and that vector can be short where α is large "
            "(Kobayashi et al. 2020); and gradients ask a different question: how much does the word's probability change "
            "with each source word? Integrated Gradients (Sundararajan et al. 2017) sum the gradient along the path from no "
            "word to the word, so the scores add up to the change of log p. The rows compare the methods for the output "
            "word you pick; where they disagree, the weights alone mislead (Jain & Wallace 2019; Wiegreffe & Pinter 2019)."
        ),
        r"\mathrm{IG}_i = (x_i - x'_i) \int_0^1 \frac{\partial \log p(y \mid x' + a\,(x - x'))}{\partial x_i}\, da"
        r"\qquad \lVert \alpha_{ij}\, f(x_j) \rVert, \; f(x_j) = (x_j W^V + b^V)\, W^O",
    ),
)
