"""A package's public names imported on first use (PEP 562), so that importing the package, or
running one of its modules with ``python -m``, does not import everything it exports."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_getattr(package: str, exports: dict[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: a name of ``exports`` (name -> module) is imported
    from its module on first use and kept in ``namespace`` (the package's ``globals()``)."""

    def exported(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return exported
