"""The CUDA compatibility gate and its table."""

from __future__ import annotations

import json

import pytest

from gpunode.provision import ProvisionError, cuda


def test_table_keeps_source_and_confidence():
    rows = json.loads(cuda.TABLE.read_text())
    assert rows and all("source" in r and "confidence" in r for r in rows)


def test_minor_compat_constants_agree_with_the_table():
    rows = json.loads(cuda.TABLE.read_text())
    for r in rows:
        text = r.get("minor_version_compat_min_driver")
        if text:
            major = int(r["cuda"].split(".")[0])
            minimum = cuda.MINOR_COMPAT_MIN[major]
            # the exact driver, or (rows without one) the branch it opens
            assert minimum in text or f">={minimum.split('.')[0]} branch" in text, (r["cuda"], text)


def test_strict_native():
    v = cuda.gate("11.8", "535.261.03", "strict")
    assert v.ok and v.mode == "native" and v.minimum == "520.61.05"


def test_strict_refuses_and_says_what_to_change():
    v = cuda.gate("12.4", "535.261.03", "strict")
    assert not v.ok and v.mode == "refused"
    for part in (
        "CUDA 12.4",
        "535.261.03",
        ">= 550.54.14",
        "nvidia_driver_version",
        "cuda_toolkit_compat_policy: minor",
        "CUDA <= 12.2.2",
    ):
        assert part in v.message, part


def test_minor_policy_accepts_same_major():
    v = cuda.gate("12.4", "535.261.03", "minor")
    assert v.ok and v.mode == "minor" and v.minimum == "525.60.13"


@pytest.mark.parametrize(
    ("cuda_v", "driver", "ok"),
    [
        ("11.8", "450.80.02", True),
        ("11.8", "450.80.01", False),
        ("12.9", "525.60.13", True),
        ("12.9", "525.60.12", False),
        ("13.2", "580.0", True),
        ("13.2", "575.57.08", False),
    ],
)
def test_minor_compat_minimums(cuda_v, driver, ok):
    assert cuda.gate(cuda_v, driver, "minor").ok is ok


def test_forward_needs_datacenter_gpus():
    assert cuda.gate("13.0", "535.261.03", "forward", datacenter=True).packages == [
        "cuda-compat-13-0"
    ]
    refused = cuda.gate("13.0", "535.261.03", "forward", datacenter=False)
    assert not refused.ok and "data center" in refused.message
    assert cuda.gate("13.0", "535.261.03", "forward", datacenter=None).mode == "undecided"
    assert not cuda.gate("13.0", "535.261.03", "minor", datacenter=True).ok


def test_unknown_cuda_names_variable_and_accepted():
    with pytest.raises(ProvisionError) as exc:
        cuda.gate("12.7", "560.35.03")
    msg = str(exc.value)
    assert msg.startswith(
        "cuda_toolkit_versions: CUDA '12.7' is not a known release; accepted: 10.0,"
    )
    assert "\n" not in msg and "12.6" in msg and "12.8" in msg


def test_malformed_and_policy():
    with pytest.raises(
        ProvisionError, match="cuda_toolkit_versions: 'twelve' is not a CUDA version"
    ):
        cuda.gate("twelve", "560.35.03")
    with pytest.raises(ProvisionError, match="cuda_toolkit_compat_policy: 'loose' is not one of"):
        cuda.gate("12.4", "560.35.03", "loose")


def test_major_minor_resolves_to_ga():
    assert cuda.resolve("v", "11.0").cuda == "11.0.2"
    assert cuda.resolve("v", "12.4.0").cuda == "12.4"


def test_datacenter_models():
    assert cuda.is_datacenter("NVIDIA A100-SXM4-80GB", "")
    assert cuda.is_datacenter("NVIDIA H100 80GB HBM3", "nvidia")
    assert cuda.is_datacenter("Tesla T4", "")
    assert not cuda.is_datacenter("NVIDIA GeForce RTX 4090", "geforce")
