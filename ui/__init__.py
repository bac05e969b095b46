"""The Streamlit front end: app.py is the frame, each view a page in ui/pages/, shared parts here.

- ``keys``: every session-state key and URL parameter, named once;
- ``catalog``: the pages, decoding methods, examples, and how old single-page links map to pages;
- ``state``: the cached model and results (``st.cache_resource`` for the model only, ``st.cache_data``
  for pure results, every input an argument) and what a page knows about the current input;
- ``widgets``: placing figures with their downloads, token chips, layer/head pickers.
"""
