"""The app's pages, one module per view; each defines ``page(frame: ui.state.Frame)``, which app.py's ``body`` calls
for the page ``st.navigation`` chose (``ui.catalog.PAGES`` lists them by URL path)."""
