"""gpunode.util.versions: the one comparison of dotted versions (provision's gates and the
runtime's NVIDIA_REQUIRE_* both use it)."""

from __future__ import annotations

import pytest

from gpunode.provision import versions as provision_versions
from gpunode.runtime import requirements
from gpunode.util import versions


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        ("580", "580.0.0", 0),
        ("12.4", "12.4.0", 0),
        ("535.261.03", "535.261.3", 0),
        ("535.261.03", "535.86.10", 1),
        ("12.10", "12.9", 1),
        ("12", "12.0.1", -1),
        ("1.0.2", "1.0.2.0", 0),
        ("550.163.01", "560", -1),
    ],
)
def test_numeric_field_order_with_missing_fields_as_zero(a, b, want):
    ka, kb = versions.key(a), versions.key(b)
    assert (ka > kb) - (ka < kb) == want
    assert versions.at_least(a, b) is (want >= 0)


def test_one_home():
    assert provision_versions.key is versions.key
    assert provision_versions.at_least is versions.at_least
    assert requirements.version_key is versions.key


def test_not_a_number_raises_value_error():
    with pytest.raises(ValueError):
        versions.key("12.x")


def test_a_component_of_thousands_of_digits_compares_without_int():
    """An image's NVIDIA_REQUIRE_CUDA=cuda>=111...1 (5,000 digits): int() refuses more than
    4,300 digits with a ValueError, which reached the container's create as a traceback."""
    huge = "1" * 5000
    assert versions.key(huge) > versions.key("999999999999999999")
    assert not versions.at_least("12.4", "12." + huge)
    assert versions.at_least("1." + "0" * 5000 + "7", "1.7")  # leading zeros: the number 7
    assert versions.key("0" * 5000) == (0,)
    req = requirements.parse_requirement("cuda>=" + huge)
    assert versions.key(req[0][0].value) == (versions.HUGE + 5000,)
    with pytest.raises(ValueError):
        versions.key("1x" * 3000)
