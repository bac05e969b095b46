# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Attention Explorer in a notebook
#
# The figures of the app, without Streamlit: this notebook loads the shipped English→German model, translates one
# sentence and shows
#
# 1. every attention map of one kind at once (the mosaic of the Attention page),
# 2. one head's arithmetic for one query: scores q·k/√d_head, softmax weights, the weighted sum of values
#    (the Head page),
# 3. attention beside attribution for one output token (the Explain page).
#
# Everything here is the `model`, `analysis` and `viz` packages called as a library: `model` runs the Transformer,
# `analysis` computes records of plain numpy arrays, `viz` turns records into plotly figures.
#
# Open it in Jupyter with jupytext (`jupyter lab examples/explore.py`, then "Open as notebook"), or make an
# `.ipynb` of it: `jupytext --to ipynb examples/explore.py`. It runs in well under a minute on a laptop's CPU.

# %%
import sys
from pathlib import Path

import plotly.io as pio

# The repository root: the folder above this notebook that holds pretrained/ (Jupyter starts in examples/).
ROOT = next(folder for folder in [Path.cwd(), *Path.cwd().parents] if (folder / "pretrained" / "en-de").is_dir())
sys.path.insert(0, str(ROOT))

from analysis.analyze import analyze  # noqa: E402
from analysis.attribution import explain  # noqa: E402
from analysis.trace import head_trace  # noqa: E402
from model.checkpoint import load_checkpoint  # noqa: E402
from viz import attention as viz_attention  # noqa: E402
from viz import explain as viz_explain  # noqa: E402
from viz import head as viz_head  # noqa: E402

# Plotly's own mime type (JupyterLab, VS Code and nbviewer draw it) and HTML that fetches plotly.js (classic Notebook).
pio.renderers.default = "plotly_mimetype+notebook_connected"

# %% [markdown]
# ## Load the model and translate a sentence
#
# `load_checkpoint` reads a checkpoint folder (weights, config, vocabulary) into an eval-mode model on the CPU (or a
# GPU where there is one). `analyze` translates greedily and keeps every attention map of that translation.

# %%
loaded = load_checkpoint(ROOT / "pretrained" / "en-de", device="cpu")
model, tokenizer = loaded.model, loaded.tokenizer
config = model.cfg
print(f"{config.n_enc_layers} encoder + {config.n_dec_layers} decoder layers, {config.n_heads} heads, d_model {config.d_model}")

sentence = "The little girl is climbing the stairs to her room."
analysis = analyze(model, tokenizer, sentence)
print("source pieces:", analysis.source.tokens)
print("translation:  ", analysis.translation)

# %% [markdown]
# ## 1 · Every cross-attention map
#
# One tile per decoder layer (rows) and head (columns): row t of a tile is the decoder at output token t, its
# columns the source pieces it reads. Swap `"cross"` for `"enc_self"` or `"dec_self"` to see the other two kinds.

# %%
viz_attention.attention_mosaic(analysis.view("cross"), title="Cross-attention: every decoder layer × head")

# %% [markdown]
# ## 2 · One head's arithmetic
#
# `head_trace` recomputes one head by hand for one query row and checks it against the model's own output. Here:
# the last decoder layer's cross-attention, head 1 (0-based), at decoder input 2, the row that predicts the third
# output token. Passing the analysis
# saves translating the sentence again.

# %%
layer, head, query = config.n_dec_layers - 1, 1, 2
trace = head_trace(model, tokenizer, sentence, kind="cross", layer=layer, head=head, query=query, analysis=analysis)
print(viz_head.where(trace), "·", viz_head.query_name(trace))
viz_head.scores_figure(trace)

# %%
viz_head.weights_figure(trace)

# %%
viz_head.weighted_sum_figure(trace)

# %% [markdown]
# ## 3 · Attention beside attribution
#
# Why did the decoder write output token `position`? `explain` compares the attention weights of a cross-attention
# head with attributions of the token's log-probability to the source pieces (norm-weighted attention, rollout,
# gradient × input). Integrated Gradients take one forward and backward pass per step (1536 by default, minutes
# on a CPU); `ig_steps=0` leaves them out, so the notebook stays fast. `ig_steps=96, ig_segments=4` gives a coarse
# version in about a minute.

# %%
position = 2  # the third output token (0-based)
explanation = explain(model, tokenizer, analysis.source.ids, analysis.out_ids, position, ig_steps=0)
print(viz_explain.objective_text(explanation))
viz_explain.methods_figure(explanation, layer, head)

# %%
viz_explain.agreement_figure(explanation, layer, head)
