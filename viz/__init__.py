"""Plotly figures of attention: records (``analysis.records``) or arrays and tokens in, ``go.Figure``
(or a DataFrame / text) out.

No model and no Streamlit here, so every figure can be tested and reused from a notebook. The
attention figures draw an ``AttentionView`` / ``MapView``, the step and beam figures a
``StepView`` / ``BeamTree``, the word-order figure a ``WordOrder``: what ``analysis.analyze``
computed, including which cells were hidden and why, is drawn and never worked out again.
Arrays may be numpy or torch (converted with ``np.asarray`` after ``.detach().cpu()``); every
function checks shapes and raises ``ValueError`` saying how to fix the call.

Modules:
    tokens      display forms of tokens (``▁`` for a leading space) and unique labels
    attention   the layer × head mosaic (one trace), one head zoomed, before/after difference
    steps       next-token candidates, the new query's attention, the beam-search tree
    positional  the positional-encoding matrix, its waves, similarity, the word-order demo
    stats       what each per-head statistic means, and the attention-rollout figure (both computed in model/)
    compare     two inputs: how far each source token's encoder output moved
    shapes      the tensor shapes of one forward pass, as a table and a diagram
    export      CSV of a map, HTML of a figure
"""
