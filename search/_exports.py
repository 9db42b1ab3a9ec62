"""Lazy public faces: a package names what it exports, and a name's module is imported on first use.

``import torch`` alone costs about 2 s and Optuna about another second, so a command that prints one
line for bad input, or only reads a finished study, must not import modules it never uses. Each
package's ``__init__`` therefore lists its modules and their public names once, in the order a reader
meets them, and hands the table to :func:`lazy_exports` (PEP 562): ``from search.storage import
mask_url`` imports ``search.storage._urls`` and nothing else of the package.

Example:

    .. code::

        __getattr__, __dir__, __all__ = lazy_exports(__name__, {
            "_urls": ("mask_url", "redact"),
            "_open": ("open_storage",),
        })
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, table: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], object], Callable[[], list[str]], list[str]]:
    """The ``__getattr__``, ``__dir__`` and ``__all__`` of ``package``.

    Args:
        package: The package's ``__name__``.
        table: Module (relative to ``package``, e.g. ``"_urls"``) -> the public names it defines.

    Raises:
        ValueError: A name is listed under two modules.
    """
    home: dict[str, str] = {}
    for module, names in table.items():
        for name in names:
            if name in home:
                raise ValueError(f"{package}: {name!r} listed under {home[name]!r} and {module!r}")
            home[name] = module

    def __getattr__(name: str) -> object:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)  # Found once; later lookups are plain attributes.
        return value

    def __dir__() -> list[str]:
        return sorted(home)

    return __getattr__, __dir__, sorted(home)
