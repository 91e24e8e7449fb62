"""Light and dark terminals: the 16 colours the UI names (yellow headings, green `+` lines, cyan
names, Markdown's code on black) are remapped per theme so that every text is at least 4.5:1
against the background with the xterm palette (tests/test_theme.py computes it from this table).
``ui.theme``: auto (from COLORFGBG, which many terminals set: "15;0" is light text on black, else
the terminal's own answer about its background, ui/termquery.py), dark or light. The remap happens where every segment passes (ui/console.InertConsole)."""

from __future__ import annotations

from functools import lru_cache
from typing import Callable, Mapping

from rich.color import Color, ColorType
from rich.style import Style

THEMES = ("auto", "dark", "light")
# The background each theme assumes (an xterm palette index) and the text colours replaced on it.
BACKGROUND = {"dark": 0, "light": 15}
FOREGROUND = {"dark": 7, "light": 0}  # the terminal's default text colour
MAPS: dict[str, dict[int, int]] = {
    "dark": {0: 8, 1: 9, 4: 75, 5: 13, 12: 75},
    "light": {2: 22, 3: 94, 4: 19, 5: 90, 6: 24, 7: 240, 8: 240, 9: 124, 10: 22, 11: 94, 12: 19, 13: 90, 14: 24, 15: 240},
}
# Backgrounds replaced in the light theme (rich's Markdown draws inline code on black).
BACKGROUNDS: dict[str, dict[int, int]] = {"dark": {}, "light": {0: 255, 8: 255}}


def pick_theme(setting: str, env: Mapping[str, str]) -> str:
    """dark or light: the setting, or for auto the background COLORFGBG names (dark when unknown)."""
    return choose_theme(setting, env)[0]


def choose_theme(setting: str, env: Mapping[str, str],
                 ask: Callable[[], "bool | None"] | None = None) -> tuple[str, str]:
    """(dark or light, why): the setting; for auto the background COLORFGBG names, else what ``ask``
    (the terminal, ui/termquery.py: light or not, None when it did not say) answers; else dark."""
    if setting in ("dark", "light"):
        return setting, "ui.theme"
    last = env.get("COLORFGBG", "").split(";")[-1].strip()
    if last.isdigit():
        return ("light" if int(last) in (7, 15) or 9 <= int(last) <= 14 else "dark"), "COLORFGBG"
    light = ask() if ask is not None else None
    if light is not None:
        return ("light" if light else "dark"), "the terminal's background"
    return "dark", "the default: the terminal did not say"


def _swap(color: Color | None, table: dict[int, int]) -> Color | None:
    if color is None or color.type not in (ColorType.STANDARD, ColorType.EIGHT_BIT) or color.number is None:
        return color
    target = table.get(color.number)
    return color if target is None else Color.from_ansi(target)


# Dim text (SGR 2) is drawn as this grey instead: terminals dim by different amounts, and the usual
# halving put dim text at 3.98:1 and bold+dim at 2.15:1 on white (issue 49). Both are >= 5:1 here.
DIM = {"dark": 245, "light": 242}


def _rgb(index: int) -> tuple[int, int, int]:
    """The xterm palette's colour ``index`` (16-255: the cube and the greys)."""
    if index >= 232:
        return (8 + 10 * (index - 232),) * 3
    levels = (0, 95, 135, 175, 215, 255)
    index -= 16
    return levels[index // 36], levels[index // 6 % 6], levels[index % 6]


def contrast(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    """WCAG's contrast ratio of two sRGB colours."""
    def luminance(rgb: tuple[int, int, int]) -> float:
        r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (v / 255 for v in rgb))
        return 0.2126 * r + 0.7152 * g + 0.0722 * b
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def _readable(color: Color | None, theme: str) -> Color | None:
    """A colour outside the 16 the maps cover (the 256-colour cube, true colour) that is under 4.5:1 on
    the theme's background becomes the theme's dim grey: readable whatever asked for it."""
    if color is None:
        return None
    if color.type is ColorType.EIGHT_BIT and color.number is not None and color.number >= 16:
        rgb = _rgb(color.number)
    elif color.type is ColorType.TRUECOLOR and color.triplet is not None:
        rgb = tuple(color.triplet)
    else:
        return color
    background = (0, 0, 0) if BACKGROUND[theme] == 0 else (255, 255, 255)
    return color if contrast(rgb, background) >= 4.5 else Color.from_ansi(DIM[theme])


@lru_cache(maxsize=512)
def remap(style: Style, theme: str) -> Style:
    """``style`` with its colours replaced for ``theme``, and dim drawn as a chosen grey."""
    color = _readable(_swap(style.color, MAPS[theme]), theme)
    bgcolor = _swap(style.bgcolor, BACKGROUNDS[theme])
    if style.dim:
        return style + Style(dim=False) + Style.from_color(color or Color.from_ansi(DIM[theme]), bgcolor)
    if color is style.color and bgcolor is style.bgcolor:
        return style
    return style + Style.from_color(color, bgcolor)
