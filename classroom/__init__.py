"""A teacher's room that every student's app follows: join codes, teacher secrets, rate limits and the store of
rooms, questions and answers (SQLite by default, Redis with ``ATTN_ROOM_STORE=redis://…``).

Torch-free and Streamlit-free: the pages import it (tests/test_layering.py checks it).
"""
