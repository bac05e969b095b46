"""Join codes and teacher secrets, from ``secrets``; answers' and nicknames' limits; per-session rate limits."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field

ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no look-alikes: O/0, I/1/L are left out (31 symbols)
CODE_LEN = 6  # 31**6 ≈ 8.9e8 codes
SECRET_BYTES = 24  # the teacher's control secret: 192 random bits, URL-safe base64 (32 characters)
SEAT_BYTES = 12  # a student's anonymous seat: 96 random bits
MAX_NICKNAME = 24  # characters
MAX_ANSWER = 40  # characters of a typed answer
ROOM_HOURS = 12  # a room expires this long after it was started


def new_code() -> str:
    """A fresh join code: ``CODE_LEN`` symbols of ``ALPHABET`` drawn with ``secrets``."""
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LEN))


def clean_code(text: str | None) -> str | None:
    """The join code ``text`` names (spaces and dashes dropped, upper-cased), or None if it cannot be one.

    Exact only: nothing is guessed or corrected (a mistyped code never opens another room)."""
    if not isinstance(text, str):
        return None
    code = text.strip().replace(" ", "").replace("-", "").upper()
    return code if len(code) == CODE_LEN and all(c in ALPHABET for c in code) else None


def new_secret() -> str:
    """A fresh teacher secret (URL-safe text); the store keeps only its ``secret_hash``."""
    return secrets.token_urlsafe(SECRET_BYTES)


def new_seat() -> str:
    """A fresh anonymous seat id for one student (URL-safe text)."""
    return secrets.token_urlsafe(SEAT_BYTES)


def is_seat(text: object) -> bool:
    """Whether ``text`` has the form of a seat id from ``new_seat``."""
    return isinstance(text, str) and 8 <= len(text) <= 32 and all(c.isascii() and (c.isalnum() or c in "-_") for c in text)


def secret_hash(secret: str) -> str:
    """The SHA-256 hex digest of ``secret`` (what the store keeps)."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def secret_matches(secret: str | None, stored_hash: str) -> bool:
    """Whether ``secret`` hashes to ``stored_hash``, compared in constant time."""
    if not isinstance(secret, str) or not secret:
        return False
    return hmac.compare_digest(secret_hash(secret), stored_hash)


def clean_text(text: object, limit: int) -> str:
    """``text`` as one line of at most ``limit`` characters: control characters dropped, whitespace collapsed.

    Shown as text, never HTML, whatever it holds."""
    if not isinstance(text, str):
        return ""
    text = "".join(c if c.isprintable() else " " for c in text)
    return " ".join(text.split())[:limit]


@dataclass
class Bucket:
    """A token bucket: ``burst`` actions at once, then ``rate`` per second. Thread-safe.

    ``allow()`` takes one token and says whether there was one."""

    rate: float  # tokens per second
    burst: float
    tokens: float = -1.0
    at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def allow(self, now: float | None = None) -> bool:
        """Take one token if there is one (True), else False; ``now`` in seconds (default ``time.monotonic()``)."""
        now = time.monotonic() if now is None else now
        with self.lock:
            if self.tokens < 0:
                self.tokens, self.at = self.burst, now
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
            self.at = now
            if self.tokens >= 1:
                self.tokens -= 1
                return True
            return False


def join_bucket() -> Bucket:
    """A session's join attempts: 5 at once, then one every 6 s (a code guesser tries ~10 a minute, for 8.9e8 codes)."""
    return Bucket(rate=1 / 6, burst=5)


def answer_bucket() -> Bucket:
    """A session's answers: 6 at once, then one a second."""
    return Bucket(rate=1.0, burst=6)


def start_bucket() -> Bucket:
    """A session's new rooms: 3 at once, then one a minute."""
    return Bucket(rate=1 / 60, burst=3)


FAILED_JOINS = Bucket(rate=2.0, burst=60)
"""Wrong codes tried in this process, by every session together: past it, joins wait (guessing with many sessions)."""
