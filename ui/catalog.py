"""What the app offers, as data: its pages, decoding methods, example sentences, and how links of the
single-page app (``/?view=Attention&kind=Cross-attention``) map to today's pages and short keys."""

from __future__ import annotations

from dataclasses import dataclass

from i18n import N_  # marks the data below for the catalogue; the UI translates it where shown (``_(spec.title)``)
from model.facts import KIND_NAMES
from ui import keys

SHOWN_ELSEWHERE = (
    # Fixed texts of model/ and analysis/ that the UI shows (kind names, InputError messages): marked here so Babel
    # extracts them; the UI translates them where it shows them.
    N_("Encoder self-attention"),
    N_("Decoder causal self-attention"),
    N_("Cross-attention"),
    N_("Type a sentence to translate (the input is empty)."),
    N_("Type a reference translation to compare with."),
    N_("Type a sentence in both boxes: B should use A's words in another order."),
    N_("The two sentences must use the same words in another order."),
    # the tokenizers' names of their id columns and what becomes of text they have no piece for (model/tokenizer.py,
    # model/spm_tokenizer.py)
    N_("compact id"),
    N_("cl100k id"),
    N_("SentencePiece id"),
    N_("Pieces the small vocabulary lacks are spelled byte by byte (<0x..>)."),
    N_("Text the vocabulary has no piece for (a rare character, an emoji) becomes <unk>."),
    # the shipped models' cards (pretrained/*/metrics.json, card.limits), shown in the sidebar
    N_(
        "Short everyday sentences, picture descriptions and chat turns; long or technical text comes out wrong; names "
        "it has not seen come through in 39 of 40 test sentences, phone numbers and postcodes in 37 of 40; some rare "
        'names come out a piece off or left out; large numbers ("12,000"), times in words ("half past seven") and '
        'British spellings ("colour") often come out wrong.'
    ),
    N_("Picture descriptions only (trained on Multi30k captions); everyday sentences come out garbled."),
)


@dataclass(frozen=True)
class PageSpec:
    """One page: its URL path (``/attention``), module, menu title and what it teaches."""

    path: str  # URL path and module name under ui/pages/
    title: str
    teaches: str  # one caption under the source box: the idea this page shows
    old_view: str  # its key in single-page links: ?view=<old_view>
    analysed: bool = True  # draws the frame's analysis (``ui.state.page_context``): app.py asks for it early

    @property
    def module(self) -> str:
        """The page's module, ``ui.pages.<path>``: its function ``page(frame: ui.state.Frame)`` draws the page.

        Named, not imported: the pages import ``ui.state``, which imports this catalog. app.py imports the module
        when its page runs."""
        return f"ui.pages.{self.path}"


PAGES = (
    PageSpec(
        path="translate",
        title=N_("Translate"),
        old_view="translate",
        teaches=N_(
            "What the model reads and writes. Text is cut into sub-word pieces (tiktoken cl100k pieces, renumbered "
            "into this model's small vocabulary); the encoder reads the source pieces plus <eos>, and the decoder writes the "
            "output one piece at a time, from the decoder's output vocabulary, until it emits <eos>. Greedy takes "
            "the most probable piece at each step, beam search keeps several partial outputs and picks the best-scoring one, "
            "sampling draws at random."
        ),
    ),
    PageSpec(
        path="attention",
        title=N_("Attention"),
        old_view="attention",
        teaches=N_(
            "Each tile is one head's attention weights softmax(QKᵀ/√d_head) (paper eq. 1): a row is a query token, "
            "the columns are the keys it reads, and every row sums to 1. Encoder self-attention mixes the source; decoder "
            "self-attention is causal, so a token sees only itself and earlier outputs (the grey triangle is masked); "
            "cross-attention is where each output step looks in the source, often close to a word alignment."
        ),
    ),
    PageSpec(
        path="steps",
        title=N_("Step through generation"),
        old_view="steps",
        teaches=N_(
            "Decoding is a loop. At step t the decoder has read <bos> and the t pieces written so far; it gives a "
            "probability to every piece it can write (the target vocabulary) and one is appended. Watch the new query's "
            "cross-attention move along the source, and force another candidate to see how the rest of the output follows "
            "from one choice."
        ),
    ),
    PageSpec(
        path="positional",
        title=N_("Positional encoding"),
        old_view="pe",
        analysed=False,
        teaches=N_(
            "Attention itself ignores word order: without positional information, 'dog bites man' and 'man bites dog' give "
            "the same vectors, only shuffled. The paper adds sine and cosine waves of geometrically growing wavelengths to "
            "the embeddings (section 3.5), so every position gets its own pattern and nearby positions look alike."
        ),
    ),
    PageSpec(
        path="masks",
        title=N_("Mask lab"),
        old_view="masks",
        teaches=N_(
            "Masks decide which keys a query may read. Hide source tokens, lift the causal mask, restrict self-attention "
            "to a local window, sharpen or flatten the softmax with a temperature, or switch heads off, then compare output "
            "and attention before and after. Nothing is retrained: same weights, a different forward pass."
        ),
    ),
    PageSpec(
        path="stats",
        title=N_("Head statistics"),
        old_view="stats",
        teaches=N_(
            "Numbers that summarise each head: entropy (low = focused on a few keys, high = spread out), how far it looks, "
            "and how much weight goes to the diagonal, the previous token, the first and the last token. Attention rollout "
            "(Abnar & Zuidema 2020) multiplies the layers' head-averaged maps, with the residual connection, to estimate "
            "which source tokens each encoder output mixes in the end."
        ),
    ),
    PageSpec(
        path="shapes",
        title=N_("Shapes"),
        old_view="shapes",
        teaches=N_(
            "One forward pass as tensor shapes, with this input's numbers: ids → embeddings × √d_model + positional "
            "encoding → queries, keys and values split into n_heads heads of d_head = d_model / n_heads → attention weights "
            "→ feed-forward → logits, one score per piece of the target vocabulary."
        ),
    ),
    PageSpec(
        path="head",
        title=N_("Inside one head"),
        old_view="head",
        teaches=N_(
            "One head's computation for one query token, with this input's real numbers: q = x W^Q, the keys K and "
            "values V, the scores q·k_j ÷ √d_head, the mask (−∞), softmax(QKᵀ/√d_k), the weighted sum of the values, "
            "then Concat·W^O, the residual add and the LayerNorm (paper eq. 1, sections 3.2.2 and 3.1)."
        ),
    ),
    PageSpec(
        path="compare",
        title=N_("Compare two sentences"),
        old_view="compare",
        analysed=False,
        teaches=N_(
            "Two inputs that differ in one thing (a word, the word order, singular or plural, the tense) side by side: "
            "which output pieces change, how one head's attention differs, and how far each source token's encoder "
            "vector moves. A changed word moves its own vector, and self-attention carries some of the change to its "
            "neighbours."
        ),
    ),
    PageSpec(
        path="explain",
        title=N_("Attention vs attribution"),
        old_view="explain",
        teaches=N_(
            "Is attention an explanation? For one output word, the cross-attention weights beside what they leave out: "
            "how long the vector each source word adds is (norm-weighted attention), attention followed back through the "
            "encoder (rollout), and how much each word's embedding moves the word's log-probability (Integrated Gradients, "
            "gradient × input), also against an alternative word. Where the methods disagree, the weights alone mislead. "
            "A layer lens shows at which layer the translation appears."
        ),
    ),
    PageSpec(
        path="lesson",
        title=N_("Lesson"),
        old_view="lesson",
        teaches=N_(
            "A guided tour of the Transformer in ten steps, in the order of the paper: tokens, embeddings and positions, "
            "self-attention, many heads, the causal mask, cross-attention, one decoding step, greedy and beam search, "
            "masking experiments, and whether attention is an explanation. Each step shows the live figure for your sentence; the step is in the address, so a "
            "link opens it."
        ),
    ),
    PageSpec(
        path="room",
        title=N_("Room"),
        old_view="room",
        teaches=N_(
            "Teach the class, not separate screens: start a class and every student's app follows yours (sentence, page, "
            "settings, layer, head, step). Ask the class to predict what the model does, watch the answers come in, then "
            "reveal the model's own answer beside them."
        ),
    ),
    PageSpec(
        path="exercises",
        title=N_("Exercises"),
        old_view="exercises",
        teaches=N_(
            "Your turn: do one step of the forward pass yourself with the model's real numbers for your sentence (scale "
            "the scores, mask, softmax, the weighted sum, the next token's probability, a positional encoding, a tensor's "
            "shape), check the answer, and see which usual slip it was. Progress stays in this browser session."
        ),
    ),
)
PAGE_BY_PATH = {p.path: p for p in PAGES}
DEFAULT_PAGE = "translate"

METHODS = {"greedy": N_("Greedy"), "beam": N_("Beam search"), "sample": N_("Sampling")}
"""Decoding method key (in the URL) -> label (on screen)."""

CHOICES = {keys.METHOD: METHODS, keys.KIND: KIND_NAMES}
"""URL parameters whose value is one key of a fixed set, with the labels old links used instead."""

EXAMPLES = {
    "translate": [
        "I love you.",
        "How are you today?",
        "Where do you live?",
        "Attention is all you need.",
        "The animal didn't cross the street because it was too tired.",
        "The animal didn't cross the street because it was too wide.",
        "A dog jumps over a green fence.",
        "Two young men are playing soccer in the park.",
        "A woman in a red dress is riding a bicycle.",
        "A little girl climbs into a wooden playhouse.",
        "The man with the hat is reading a newspaper.",
    ],
    "reverse": [" a b c d", " h e l l o", " t r a n s f o r m e r", " x y z z y", " q w e r t y u i o p"],
}


@dataclass(frozen=True)
class Pair:
    """A preset of the Compare page: two inputs that differ in one thing, and what the pair asks."""

    label: str  # in the picker
    sentence_a: str
    sentence_b: str
    asks: str  # one line under the picker


PAIRS = {
    "translate": {
        "tired-wide": Pair(
            N_("'it' refers to the animal or to the street"),
            "The animal didn't cross the street because it was too tired.",
            "The animal didn't cross the street because it was too wide.",
            N_(
                "Only the last word differs, but it decides what 'it' means: German must say 'es' for das Tier and 'sie' "
                "for die Straße. Does the output change, and does cross-attention from the pronoun move?"
            ),
        ),
        "word-order": Pair(
            N_("Word order: who bites whom"),
            "The dog bites the man.",
            "The man bites the dog.",
            N_(
                "The same words in another order. Only positional encoding tells the two apart: the vectors of 'dog' and "
                "'man' change although the words do not."
            ),
        ),
        "number": Pair(
            N_("Singular and plural"),
            "The dog is sleeping.",
            "The dogs are sleeping.",
            N_(
                "One noun and its verb change number: German changes the article, the noun and the verb (der Hund schläft, "
                "die Hunde schlafen)."
            ),
        ),
        "tense": Pair(
            N_("Present and past"),
            "The children play in the garden.",
            "The children played in the garden.",
            N_(
                "Only the verb's ending changes (play, played), and German changes the verb's ending too (spielen, "
                "spielten): watch which source piece the verb's output piece reads, and which source vectors move."
            ),
        ),
    },
    "reverse": {
        "one-letter": Pair(
            N_("One letter changed"),
            " a b c d",
            " a b x d",
            N_("The output is the input backwards: one changed letter moves to the mirror place."),
        ),
        "order": Pair(N_("Same letters, reversed"), " a b c", " c b a", N_("The same letters in the other order.")),
        "longer": Pair(
            N_("One letter more"), " a b c d", " a b c d e", N_("One letter longer: every output position shifts by one.")
        ),
    },
}
"""Preset minimal pairs of the Compare page, per task: URL key (``?pair=tired-wide``) -> Pair."""

WORD_ORDER = {"translate": ("dog bites man", "man bites dog"), "reverse": ("a b c", "c b a")}


def choice_key(options: dict[str, str], value: str | None) -> str | None:
    """The key of ``options`` (key -> label) that ``value`` names, as the key or as an old link's label; else None."""
    if value in options:
        return value
    return next((k for k, label in options.items() if label == value), None)


def old_link(params: dict[str, str]) -> tuple[PageSpec | None, dict[str, str]]:
    """The page and the query parameters of a single-page link such as ``?view=Attention&kind=Cross-attention``.

    ``view`` (an old key such as ``pe``, a page path or a page title) picks the page and is dropped; ``method``
    and ``kind`` labels become their keys; every other parameter (sentence, model, layer, head, step) is kept
    as it is. The page is None when ``view`` names no page.
    """
    view = params.get(keys.OLD_VIEW, "")
    page = next((p for p in PAGES if view in (p.old_view, p.path, p.title)), None)
    out = {k: v for k, v in params.items() if k != keys.OLD_VIEW}
    for param in CHOICES:
        if param in out:
            key = choice_key(CHOICES[param], out[param])
            if key is None:
                del out[param]
            else:
                out[param] = key
    return page, out
