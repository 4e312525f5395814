"""The launch tests use the runtime tests' fake node: its device nodes, discovery and
containerised driver tree (tests/unit/runtime/conftest.py)."""

from ..runtime.conftest import devroot, disc, driver_tree  # noqa: F401 - fixtures
