"""mlx's parameter trees as the tiny-model builders read them."""

from __future__ import annotations

from typing import Any, cast


def flat(tree: Any) -> list[tuple[str, Any]]:
    """mlx's `tree_flatten`: (dotted key, array) pairs (a list, since no dict destination is given; its annotation
    also admits the dict it returns for one)."""
    from mlx.utils import tree_flatten

    return cast(list[tuple[str, Any]], tree_flatten(tree))
