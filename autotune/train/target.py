"""The one way autotune imports what a config names by ``_target_``: a model's builder, an
optimizer class. Both spellings are accepted, Hydra's dotted ``package.module.Name`` and the
older ``package.module:Name``; the standard library's ``pkgutil.resolve_name`` reads both."""
from __future__ import annotations

import pkgutil
from typing import Any


def resolve(target: str) -> Any:
    """The object ``target`` names, imported (ImportError, AttributeError or ValueError when
    it cannot be)."""
    if not isinstance(target, str) or not target.strip():
        raise ValueError(f"{target!r} names nothing; write package.module.Name")
    if ":" not in target and "." not in target:
        raise ImportError(f"{target!r} names no module; write package.module.Name")
    return pkgutil.resolve_name(target)


def identity(target: str) -> str:
    """The one spelling a study records a target in (its setup, and so its default name):
    ``package.module:Name``, where the module's end is written out. So a study measured with
    the older spelling resumes under Hydra's, and the other way round."""
    module, attr = split(target)
    return f"{module}:{attr}" if module and attr else target


def split(target: str) -> tuple[str, str]:
    """(module, attribute) of a target whose attribute is a top-level name of its module:
    ``a.b:f`` and ``a.b.f`` both give ``("a.b", "f")``."""
    module, _, attr = target.partition(":") if ":" in target else target.rpartition(".")
    return module, attr
