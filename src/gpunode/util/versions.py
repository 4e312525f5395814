"""Dotted numeric versions (driver ``535.261.03``, CUDA ``12.4``, compute capability
``8.0``), compared the one way NVIDIA's tools compare them: field by field as numbers, a
missing field counting as 0 (``580`` is ``580.0.0``, the first 580 driver; ``12.4`` equals
``12.4.0``).

``key`` is that order as a tuple (trailing zero fields dropped, which makes lexicographic
tuple order the zero-padded one); ``at_least`` the comparison the version gates make. A
field that is not a number raises ValueError: callers check the text's form first and say
what was wrong in their own words. Only builtins: the runtime compares NVIDIA_REQUIRE_*
versions on its start path.
"""

from __future__ import annotations

HUGE = 10**18


def _part(text: str) -> int:
    if len(text) <= 18:
        return int(text)
    stripped = text.strip()
    if not (stripped.isascii() and stripped.isdigit()):
        return int(text)  # not a plain number: int()'s own answer (or its ValueError)
    digits = stripped.lstrip("0")
    return int(digits or "0") if len(digits) <= 18 else HUGE + len(digits)


def key(version: str) -> tuple[int, ...]:
    """ "535.261.03" -> (535, 261, 3); "12.4.0" -> (12, 4); "580" -> (580,).

    A component of more than 18 digits (leading zeros aside) is HUGE plus its length: no
    driver, CUDA or capability has one, and an image's NVIDIA_REQUIRE_CUDA may hold one of
    5,000 digits, which int() refuses (more than 4,300) and would take quadratic time on."""
    parts = [_part(p) for p in version.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def at_least(version: str, minimum: str) -> bool:
    """version >= minimum, field by field ("580" is the first 580 driver: 580.0.0)."""
    return key(version) >= key(minimum)
