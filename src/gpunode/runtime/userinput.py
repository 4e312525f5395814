"""What an image or a pod sends, read as hostile input: the one-line RequestError, values
shown in a message within SHOW_LIMIT characters, and the small patterns (``[0-9]+``,
versions, indices) matched without `re`, whose import and compiles cost ~3 ms on every GPU
container start. Shared by the request parser (request), the NVIDIA_REQUIRE_* language
(requirements) and device selection (selection).
"""

from __future__ import annotations


class RequestError(ValueError):
    """The container's GPU request is invalid or cannot be met; the message is one line."""


# A value from the image or pod is shown at most this long in a message: an error line
# costs what it shows, never what the image chose to send (a 5,000-character
# NVIDIA_REQUIRE_CUDA is named by its start and its length).
SHOW_LIMIT = 200


def show(value: str) -> str:
    """A user-supplied value as it goes into a one-line message (control chars escaped,
    cut to SHOW_LIMIT characters with its length said)."""
    size = len(value)
    if size > SHOW_LIMIT:
        value = value[:SHOW_LIMIT]
    if not value.isprintable():
        value = value.encode("unicode_escape").decode("ascii")
    return value if size <= SHOW_LIMIT else f"{value}... ({size} characters)"


def is_number(text: str) -> bool:
    """``[0-9]+``"""
    return text.isascii() and text.isdigit()


def is_version(text: str) -> bool:
    """``[0-9]+(\\.[0-9]+)*``"""
    return all(is_number(part) for part in text.split("."))


def as_index(text: str) -> int:
    """A ``[0-9]+`` id as a number, -1 (matches nothing) past 18 digits: an image's env is
    hostile input, and int() of a long digit run is costly or refused (ValueError beyond
    Python's 4,300-digit limit) where no index, GI or CI id is that large."""
    digits = text.lstrip("0") or "0"
    return int(digits) if len(digits) <= 18 else -1
