"""Streamlit's own floor for ``bench_class.py`` (issue 22, bench/README.md 8i): pages of plain elements as many as the
app's (a sidebar with two widgets, a title, a text box bound to the URL, captions), with no model, cache or chart.

    python bench/bench_class.py --pages translate --n 120 --windows 3 --replicas 2 --cpus 0,1 --app-root bench/floor

/translate has 33 elements (the app's Translate page sends 33 messages), /attention 48.
"""

import streamlit as st

N = {"translate": 33, "attention": 48}


def make(n):
    def page():
        with st.sidebar:
            st.selectbox("Model", ["en-de"], key="model")
            st.radio("Method", ["greedy", "beam", "sample"], horizontal=True, key="method")
        st.title("Attention Explorer")
        text = st.text_input("Source sentence", "A dog runs.", key="sentence", bind="query-params")
        for i in range(n - 7):
            st.caption(f"{i}: {text[::-1]}")

    return page


st.set_page_config(page_title="floor", layout="wide")
pages = [st.Page(make(n), title=p, url_path=p) for p, n in N.items()]
root = st.Page(make(N["translate"]), title="root", url_path="", default=True, visibility="hidden")
st.navigation([root, *pages], position="top").run()
