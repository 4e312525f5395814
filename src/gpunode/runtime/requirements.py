"""The NVIDIA_REQUIRE_* constraint language (libnvidia-container's `src/cli/dsl.c`): which
variables carry it, its grammar (terms OR'ed, factors AND'ed; properties cuda, driver, arch,
brand), and its evaluation against the node's facts and the selected GPUs.

Pure: no NVML, no file system. Every failure is a RequestError with a one-line message.
"""

from __future__ import annotations

from ..nvidia.facts import GpuFacts, NodeFacts
from ..util.record import record
from ..util.versions import key as version_key
from .config import RuntimeConfig
from .specinputs import ENV_CUDA_VERSION
from .userinput import RequestError, is_version, show

TYPE_CHECKING = False  # typing and collections cost milliseconds on every GPU container start
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

ENV_DISABLE_REQUIRE = "NVIDIA_DISABLE_REQUIRE"
ENV_REQUIRE_PREFIX = "NVIDIA_REQUIRE_"
ENV_REQUIRE_CUDA = "NVIDIA_REQUIRE_CUDA"
ENV_REQUIRE_JETPACK = "NVIDIA_REQUIRE_JETPACK"

# What Go's golang.org/x/mod/semver accepts (after a "v" is prepended): vMAJOR, vMAJOR.MINOR
# or vMAJOR.MINOR.PATCH[-pre][+build], no leading zeros.
_SEMVER = (
    r"^v?(?P<major>0|[1-9][0-9]*)(?:\.(?P<minor>0|[1-9][0-9]*)"
    r"(?:\.(?:0|[1-9][0-9]*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?)?)?$"
)

PROPERTIES = ("cuda", "driver", "arch", "brand")
OPERATORS = ("<=", ">=", "!=", "=", "<", ">")  # longest match first
_OP_CHARS = "=<>!"


@record(frozen=True)
class Factor:
    prop: str  # lower-case: cuda, driver, arch, brand
    op: str
    value: str
    text: str  # the factor as written, for error messages


# A parsed requirement: terms OR'ed, factors inside a term AND'ed.
Requirement = tuple[tuple[Factor, ...], ...]


def _legacy_requirement(cuda_version: str) -> str:
    import re  # legacy CUDA_VERSION images only

    m = re.fullmatch(_SEMVER, cuda_version)
    if not m:
        raise RequestError(
            f"invalid {ENV_CUDA_VERSION} '{show(cuda_version)}': expected MAJOR[.MINOR[.PATCH]]"
        )
    return f"cuda>={m['major']}.{m['minor'] or 0}"


def from_env(env: Mapping[str, str], legacy: bool) -> tuple[str, ...]:
    """The raw NVIDIA_REQUIRE_* expressions of ``env`` (sorted by variable name), then the
    legacy image's cuda>=X.Y (``legacy``), each validated; raises RequestError on a bad one."""
    reqs: list[str] = []
    for name in sorted(env):
        if not name.startswith(ENV_REQUIRE_PREFIX) or name.startswith(ENV_REQUIRE_JETPACK):
            continue
        expr = env[name]
        if not expr.strip(" "):
            continue  # an empty expression constrains nothing
        parse_requirement(expr, varname=name)
        reqs.append(expr)
    if legacy:
        reqs.append(_legacy_requirement(env[ENV_CUDA_VERSION]))
    return tuple(reqs)


def _invalid(factor: str, varname: str, why: str) -> RequestError:
    return RequestError(f"invalid expression '{show(factor)}' in {show(varname)}: {why}")


def _parse_factor(text: str, varname: str) -> Factor:
    accepted = (
        "expected <property><op><value> with op one of = != < <= > >= and "
        "accepted properties cuda, driver, arch, brand"
    )
    pos = next((i for i, ch in enumerate(text) if ch in _OP_CHARS), -1)
    if pos <= 0:
        raise _invalid(text, varname, accepted)
    prop = text[:pos].lower()
    if prop not in PROPERTIES:
        raise _invalid(text, varname, f"unknown property; {accepted}")
    rest = text[pos:]
    op = next((o for o in OPERATORS if rest.startswith(o)), None)
    if op is None:
        raise _invalid(text, varname, f"bad operator; {accepted}")
    value = rest[len(op) :]
    if prop == "brand":
        if op not in ("=", "!="):
            raise _invalid(text, varname, "brand accepts only = and !=")
        if not value or any(ch in _OP_CHARS for ch in value):
            raise _invalid(text, varname, "expected a brand name such as tesla")
    elif not is_version(value):
        raise _invalid(text, varname, f"{prop} needs a version of digits and dots, e.g. 12.2")
    return Factor(prop, op, value, text)


def parse_requirement(expr: str, *, varname: str = "requirement") -> Requirement:
    """Parse one NVIDIA_REQUIRE_* expression (dsl.c grammar).

    Space-separated terms are OR'ed; comma-separated factors inside a term are AND'ed.
    Raises RequestError("invalid expression '<factor>' in <varname>: ...").
    """
    terms: list[tuple[Factor, ...]] = []
    for term in expr.split(" "):
        factors = tuple(_parse_factor(f, varname) for f in term.split(",") if f)
        if factors:
            terms.append(factors)
    return tuple(terms)


def _compare(op: str, left: tuple | str, right: tuple | str) -> bool:
    if op == "=":
        return left == right
    if op == "!=":
        return left != right
    if op == "<":
        return left < right  # type: ignore[operator]
    if op == "<=":
        return left <= right  # type: ignore[operator]
    if op == ">":
        return left > right  # type: ignore[operator]
    return left >= right  # type: ignore[operator]


def _node_version(what: str, value: str, factor: Factor) -> tuple[int, ...]:
    value = value.strip()
    if not is_version(value):
        raise RequestError(
            f"cannot check {show(factor.text)}: {what} is '{show(value)}', not a version"
        )
    return version_key(value)


def _factor_holds(factor: Factor, node: NodeFacts, gpu: GpuFacts | None) -> bool:
    if factor.prop in ("arch", "brand") and gpu is None:
        return True  # no devices: arch and brand pass vacuously (dsl.c)
    if factor.prop == "brand":
        assert gpu is not None
        return _compare(factor.op, gpu.brand.lower(), factor.value.lower())
    if factor.prop == "cuda":
        have = _node_version("the driver's CUDA version", node.cuda_version, factor)
    elif factor.prop == "driver":
        have = _node_version("the driver version", node.driver_version, factor)
    else:
        assert gpu is not None
        have = _node_version(
            f"GPU {gpu.index}'s compute capability", gpu.compute_capability, factor
        )
    return _compare(factor.op, have, version_key(factor.value))


def _evaluate(req: Requirement, node: NodeFacts, gpu: GpuFacts | None) -> Factor | None:
    """None if satisfied, else the last failing factor (of the last failing term)."""
    failed: Factor | None = None
    for term in req:
        for factor in term:
            if not _factor_holds(factor, node, gpu):
                failed = factor
                break
        else:
            return None
    return failed


def check_requirements(
    requirements: Sequence[str],
    node: NodeFacts,
    selected: Sequence[GpuFacts],
    cfg: RuntimeConfig | None = None,
) -> None:
    """Raise RequestError("unsatisfied condition: <factor>") unless every requirement holds.

    Evaluated once per selected GPU; with none selected, once with arch/brand passing.
    """
    if cfg is not None and cfg.disable_require:
        return
    parsed = [parse_requirement(r) for r in requirements]
    targets: Sequence[GpuFacts | None] = list(selected) or [None]
    for gpu in targets:
        for req in parsed:
            failed = _evaluate(req, node, gpu)
            if failed is not None:
                raise RequestError(f"unsatisfied condition: {show(failed.text)}")
