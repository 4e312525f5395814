"""A small stand-in for dataclasses, for modules on the container-start path.

`import dataclasses` pulls in inspect, ast and dis: about 10 ms of a GPU container's start
on our nodes, paid by every `docker run`. The runtime's records need only an __init__ with
defaults, __repr__, __eq__, immutability for some, and asdict(); this provides those from
the class annotations without importing anything. tests/unit/util/test_record.py holds it
against dataclasses on each of these cases.
"""

from __future__ import annotations

_MISSING = object()


class _Factory:
    __slots__ = ("make",)

    def __init__(self, make):
        self.make = make


def factory(make):
    """Default value produced per instance (like dataclasses.field(default_factory=...))."""
    return _Factory(make)


def _names(cls) -> list[str]:
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        for name in klass.__dict__.get("__annotations__", {}):  # noqa: RUF063 - no inspect
            if name not in names:
                names.append(name)
    return names


def record(cls=None, *, frozen: bool = False):
    """Class decorator: fields are the annotated class attributes, in order."""

    def wrap(cls):
        names = _names(cls)
        defaults = {n: cls.__dict__[n] for n in names if n in cls.__dict__}
        for n, default in defaults.items():
            if isinstance(default, _Factory):
                delattr(cls, n)  # instances get their own value

        def __init__(self, *args, **kwargs):
            if len(args) > len(names):
                raise TypeError(f"{cls.__name__}() takes {len(names)} arguments")
            values = dict(zip(names, args, strict=False))
            for key, value in kwargs.items():
                if key not in names:
                    raise TypeError(f"{cls.__name__}() got an unexpected argument {key!r}")
                if key in values:
                    raise TypeError(f"{cls.__name__}() got {key!r} twice")
                values[key] = value
            for name in names:
                if name not in values:
                    default = defaults.get(name, _MISSING)
                    if default is _MISSING:
                        raise TypeError(f"{cls.__name__}() missing argument {name!r}")
                    values[name] = default.make() if isinstance(default, _Factory) else default
                object.__setattr__(self, name, values[name])
            post = getattr(self, "__post_init__", None)
            if post is not None:
                post()

        def __repr__(self):
            inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
            return f"{cls.__name__}({inner})"

        def __eq__(self, other):
            if other.__class__ is not self.__class__:
                return NotImplemented
            return all(getattr(self, n) == getattr(other, n) for n in names)

        cls.__init__ = __init__
        cls.__repr__ = __repr__
        cls.__eq__ = __eq__
        cls.__record_fields__ = tuple(names)
        if frozen:

            def __setattr__(self, name, value):
                raise AttributeError(f"{cls.__name__} is frozen: cannot set {name!r}")

            def __delattr__(self, name):
                raise AttributeError(f"{cls.__name__} is frozen: cannot delete {name!r}")

            def __hash__(self):
                return hash(tuple(getattr(self, n) for n in names))

            cls.__setattr__ = __setattr__
            cls.__delattr__ = __delattr__
            cls.__hash__ = __hash__
        else:
            cls.__hash__ = None
        return cls

    return wrap if cls is None else wrap(cls)


def fields(obj_or_cls) -> tuple[str, ...]:
    return obj_or_cls.__record_fields__


def asdict(obj):
    """Records to dicts, recursively through lists, tuples and dicts (as dataclasses.asdict)."""
    if hasattr(obj, "__record_fields__") and not isinstance(obj, type):
        return {n: asdict(getattr(obj, n)) for n in obj.__record_fields__}
    if isinstance(obj, list):
        return [asdict(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(asdict(v) for v in obj)
    if isinstance(obj, dict):
        return {k: asdict(v) for k, v in obj.items()}
    return obj


def replace(obj, **changes):
    values = {n: getattr(obj, n) for n in obj.__record_fields__}
    values.update(changes)
    return obj.__class__(**values)
