"""The lazy part of a package's public face: names imported under ``if TYPE_CHECKING:``, loaded on first use.

Each ``__init__`` imports its public names explicitly. Where a module would import torch (about 2 s),
Optuna (about 1 s), plotly, scikit-learn or SQLAlchemy, a command that prints ``--help``, refuses bad
input or only reads a finished study must not pay for it, so its names are written as real imports
under ``if TYPE_CHECKING:`` (a reader, an editor and a type checker follow them) and
:func:`lazy_face` reads that block back from the package's source and imports a name's module the
first time the name is asked for (PEP 562).

Example:

    .. code::

        from typing import TYPE_CHECKING

        from search._lazy import lazy_face
        from search.storage._urls import mask_url

        if TYPE_CHECKING:  # _open imports Optuna: loaded on first use.
            from search.storage._open import open_storage

        __getattr__, __dir__ = lazy_face(__name__, globals())
        __all__ = ["mask_url", "open_storage"]
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

__all__ = ["lazy_face", "lazy_names"]


def lazy_names(source: str) -> dict[str, tuple[str, str]]:
    """The names a module's source imports under a top-level ``if TYPE_CHECKING:``: name -> (module, its name
    there).

    Raises:
        ValueError: A name is imported twice, or the block holds something other than absolute ``from``
            imports.
    """
    found: dict[str, tuple[str, str]] = {}
    for node in ast.parse(source).body:
        if not (
            isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        ):
            continue
        for statement in node.body:
            if not (isinstance(statement, ast.ImportFrom) and statement.module and statement.level == 0):
                raise ValueError(f"line {statement.lineno}: only 'from package.module import name' is read")
            for alias in statement.names:
                name = alias.asname or alias.name
                if name in found:
                    raise ValueError(f"line {statement.lineno}: {name!r} imported twice")
                found[name] = (statement.module, alias.name)
    return found


def lazy_face(
    package: str, namespace: MutableMapping[str, Any]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose ``globals()`` are ``namespace``.

    Args:
        package: The package's ``__name__``.
        namespace: Its ``globals()``: its ``__file__`` is read, and a name found is kept there.
    """
    lazy = lazy_names(pathlib.Path(namespace["__file__"]).read_text(encoding="utf-8"))

    def __getattr__(name: str) -> object:
        where = lazy.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[0]), where[1])
        setattr(sys.modules[package], name, value)  # Found once; later lookups are plain attributes.
        return value

    def __dir__() -> list[str]:
        return sorted(namespace.get("__all__", namespace.keys() | lazy.keys()))

    return __getattr__, __dir__
