"""The app's pages, one module per view; each defines ``page(frame: ui.state.Frame)``, which app.py's
``st.navigation`` runs (``ui.catalog.PAGES`` lists them by URL path)."""
