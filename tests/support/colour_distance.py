"""How far apart two colours look, also to a colour-blind eye: the CIELAB distance (CIE76 delta E) between two sRGB
colours seen with normal vision and as simulated for protanopia, deuteranopia and tritanopia (Machado, Oliveira and
Fernandes 2009, severity 1), the smallest of the four. Used by tests/analysis/test_colors.py (the chosen palette)
and tests/tracking/test_track_ui.py (the colours the browser draws). A delta E near 2 is barely seen; the two
near-identical dark blues of issue 65 (#434a93, #445461) are 15 apart to a protanope."""
from __future__ import annotations

import itertools
import math
import re

import numpy as np

VISIONS = {
    "normal": np.eye(3),
    "protanopia": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                            [-0.003882, -0.048116, 1.051998]]),
    "deuteranopia": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                              [-0.011820, 0.042940, 0.968881]]),
    "tritanopia": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                            [0.004733, 0.691367, 0.303900]]),
}


def srgb(colour: str) -> tuple[float, float, float]:
    """'#2272b4' or 'rgb(34, 114, 180)' as three fractions."""
    if colour.startswith("#"):
        return tuple(int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return tuple(int(part) / 255 for part in re.findall(r"\d+", colour)[:3])


def lab(colour: str, vision: str = "normal") -> tuple[float, float, float]:
    """CIELAB (D65) of ``colour`` as seen with ``vision`` (the simulation acts on linear RGB)."""
    linear = np.array([((c + 0.055) / 1.055) ** 2.4 if c > 0.04045 else c / 12.92 for c in srgb(colour)])
    r, g, b = np.clip(VISIONS[vision] @ linear, 0, 1)
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    f = [v ** (1 / 3) if v > 0.008856 else 7.787 * v + 16 / 116 for v in (x, y, z)]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def distance(a: str, b: str) -> float:
    """The smallest delta E between ``a`` and ``b`` over the four visions."""
    return min(math.dist(lab(a, vision), lab(b, vision)) for vision in VISIONS)


def closest_pair(colours) -> tuple[float, str, str]:
    """(delta E, a, b) of the two of ``colours`` that look most alike."""
    return min((distance(a, b), a, b) for a, b in itertools.combinations(colours, 2))
