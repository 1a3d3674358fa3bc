"""Token-length distributions for prompts and outputs, plus vLLM's joint ``--dataset-name random``.

Every distribution answers ``sample(n, rng) -> int64 array`` of lengths >= 1, drawing only from the
passed generator and in one vectorised call. The classes live in simulator/workload/kinds/, one
module per kind; this module holds what they share.
"""
from __future__ import annotations

from typing import Annotated

import numpy as np

from cost_models.options import Constraint

PositiveInt = Annotated[int, Constraint(strict=True, ge=1)]
NonNegativeInt = Annotated[int, Constraint(strict=True, ge=0)]


def invalid(name: str, value: object, allowed: str) -> ValueError:
    """The one-line error for bad input: the field, the value and what is allowed."""
    return ValueError(f"{name}: {value!r} is not allowed; must be {allowed}")


def require_int(owner: str, name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise invalid(f"{owner}.{name}", value, f"an integer >= {minimum}")


def parse_length(text: str, where: str) -> int:
    """One token count from text ("512" or "512.0"); ``where`` names the file and line in errors."""
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"{where}: {text.strip()!r} is not a token count") from None
    if not number.is_integer() or number < 1:
        raise ValueError(f"{where}: {text.strip()!r} is not allowed; a token count must be an integer >= 1")
    return int(number)
