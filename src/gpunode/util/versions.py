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


def key(version: str) -> tuple[int, ...]:
    """"535.261.03" -> (535, 261, 3); "12.4.0" -> (12, 4); "580" -> (580,)."""
    parts = [int(p) for p in version.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def at_least(version: str, minimum: str) -> bool:
    """version >= minimum, field by field ("580" is the first 580 driver: 580.0.0)."""
    return key(version) >= key(minimum)
