"""Shared by every test: plotly checks every figure the tests build (``viz._common.VALIDATE_FIGURES``).

The app builds its figures without plotly's property check (it is most of a figure's cost); here it is on,
set before ``viz`` is imported, so that every figure of every test (page runs in AppTest included) is
checked by plotly's own schema.
"""

import os

os.environ.setdefault("ATTENTION_EXPLORER_VALIDATE_FIGURES", "1")
