"""The public surface: everything in __all__ exists, and every public name is in __all__."""

import memory_core


def test_all_names_resolve():
    for name in memory_core.__all__:
        assert hasattr(memory_core, name), name


def test_public_names_are_exported():
    public = {n for n in dir(memory_core) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(memory_core, n)).__name__ == "module"}
    assert public - modules == set(memory_core.__all__)
