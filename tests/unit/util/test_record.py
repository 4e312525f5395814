"""gpunode.util.record against dataclasses, on every case its docstring claims: __init__
with defaults and per-instance factories, __repr__, __eq__, frozen (immutable, hashable),
__post_init__, inherited fields, fields(), asdict() and replace()."""

from __future__ import annotations

import dataclasses

import pytest

from gpunode.util import record as rec


def twins(frozen: bool = False):
    """The same class made by dataclasses and by record: (dataclass, record class)."""

    def make(decorate, factory):
        class Point:
            x: int
            y: int = 2
            tags: list[str] = factory(list)

        Point.__qualname__ = Point.__name__ = "Point"
        return decorate(Point)

    return (
        make(dataclasses.dataclass(frozen=frozen), lambda f: dataclasses.field(default_factory=f)),
        make(rec.record(frozen=frozen), rec.factory),
    )


def outcome(fn):
    """What calling fn gives: ("ok", value) or ("raises", exception type)."""
    try:
        return ("ok", fn())
    except Exception as exc:
        return ("raises", type(exc))


INIT_CASES = [
    ((1,), {}),
    ((1, 5), {}),
    ((1, 5, ["a"]), {}),
    ((), {"x": 1, "tags": ["t"]}),
    ((), {"y": 3, "x": 0}),
    ((), {}),  # x missing
    ((1, 2, [], 4), {}),  # too many
    ((1,), {"x": 2}),  # x twice
    ((1,), {"z": 2}),  # unknown
]


@pytest.mark.parametrize("frozen", [False, True])
@pytest.mark.parametrize(("args", "kwargs"), INIT_CASES)
def test_init_and_repr_like_dataclasses(frozen, args, kwargs):
    dc, rc = twins(frozen)
    want = outcome(lambda: repr(dc(*args, **kwargs)))
    got = outcome(lambda: repr(rc(*args, **kwargs)))
    assert got == want


def test_factory_gives_each_instance_its_own_value():
    for cls in twins():
        a, b = cls(1), cls(1)
        a.tags.append("x")
        assert b.tags == [] and a.tags == ["x"]
        assert "tags" not in cls.__dict__ or not isinstance(cls.__dict__["tags"], list)


@pytest.mark.parametrize("frozen", [False, True])
def test_equality_like_dataclasses(frozen):
    dc, rc = twins(frozen)
    pairs = [((1,), (1,)), ((1,), (2,)), ((1, 2, ["a"]), (1, 2, ["a"])), ((1, 2), (1, 3))]
    for left, right in pairs:
        assert (rc(*left) == rc(*right)) == (dc(*left) == dc(*right))
        assert (rc(*left) != rc(*right)) == (dc(*left) != dc(*right))
    # another class with the same fields is never equal (NotImplemented, then identity)
    other_dc, other_rc = twins(frozen)
    assert (rc(1) == other_rc(1)) == (dc(1) == other_dc(1)) is False
    assert rc(1).__eq__(object()) is NotImplemented and dc(1).__eq__(object()) is NotImplemented


def test_frozen_is_immutable_and_hashable_like_dataclasses():
    dc, rc = twins(frozen=True)
    for cls in (dc, rc):
        p = cls(1, 2, ())
        with pytest.raises(AttributeError):
            p.x = 5
        with pytest.raises(AttributeError):
            del p.x
        assert hash(cls(1, 2, ())) == hash(cls(1, 2, ()))
        assert len({cls(1, 2, ()), cls(1, 2, ()), cls(2, 2, ())}) == 2


def test_mutable_is_settable_and_unhashable_like_dataclasses():
    for cls in twins(frozen=False):
        p = cls(1)
        p.x = 5
        assert p.x == 5
        assert cls.__hash__ is None
        with pytest.raises(TypeError):
            hash(p)


def test_post_init_runs_after_the_fields_are_set():
    seen = {}

    def post(self):
        seen[type(self).__module__, self.__class__.__name__] = (self.x, self.y)

    @dataclasses.dataclass
    class D:
        x: int
        y: int = 0
        __post_init__ = post

    @rec.record
    class R:
        x: int
        y: int = 0
        __post_init__ = post

    D(1, 2)
    R(1, 2)
    assert sorted(seen.values()) == [(1, 2), (1, 2)]


def test_inherited_fields_come_first_in_definition_order():
    @dataclasses.dataclass
    class BaseD:
        a: int
        b: int = 1

    @dataclasses.dataclass
    class SubD(BaseD):
        c: int = 2
        b: int = 5  # redefined: keeps its place, takes the new default

    @rec.record
    class BaseR:
        a: int
        b: int = 1

    @rec.record
    class SubR(BaseR):
        c: int = 2
        b: int = 5

    assert [f.name for f in dataclasses.fields(SubD)] == list(rec.fields(SubR)) == ["a", "b", "c"]
    SubD.__qualname__ = SubR.__qualname__ = "Sub"  # dataclasses print the qualified name
    SubD.__name__ = SubR.__name__ = "Sub"
    assert repr(SubD(0)) == repr(SubR(0)) == "Sub(a=0, b=5, c=2)"
    assert rec.fields(SubR(0)) == ("a", "b", "c")


def test_asdict_recurses_like_dataclasses():
    @dataclasses.dataclass(frozen=True)
    class InnerD:
        v: int

    @dataclasses.dataclass
    class OuterD:
        one: InnerD
        many: list
        pair: tuple
        by_name: dict
        plain: str = "s"

    @rec.record(frozen=True)
    class InnerR:
        v: int

    @rec.record
    class OuterR:
        one: InnerR
        many: list
        pair: tuple
        by_name: dict
        plain: str = "s"

    def build(outer, inner):
        return outer(inner(1), [inner(2), [inner(3)]], (inner(4), 5), {"k": inner(6), "n": None})

    want = dataclasses.asdict(build(OuterD, InnerD))
    got = rec.asdict(build(OuterR, InnerR))
    assert got == want
    assert type(got["pair"]) is type(want["pair"]) is tuple
    assert rec.asdict(OuterR) is OuterR  # a class is not an instance: returned as is


@pytest.mark.parametrize("frozen", [False, True])
def test_replace_like_dataclasses(frozen):
    dc, rc = twins(frozen)
    for changes in ({"y": 9}, {"x": 0, "tags": ["n"]}, {}):
        want = dataclasses.replace(dc(1, 2, ["t"]), **changes)
        got = rec.replace(rc(1, 2, ["t"]), **changes)
        assert repr(got) == repr(want)
    assert outcome(lambda: rec.replace(rc(1), z=1)) == outcome(
        lambda: dataclasses.replace(dc(1), z=1)
    )
