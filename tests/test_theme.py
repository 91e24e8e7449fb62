"""Light and dark: every text colour the UI can name, after the theme's remap, is at least 4.5:1
against the theme's background with the xterm palette (WCAG contrast, computed from the table);
COLORFGBG picks the theme; the remap happens at the console every front end draws with."""

from __future__ import annotations

import io

import pytest
from rich.color import Color
from rich.style import Style

from clovercode.ui.console import InertConsole, use_theme
from clovercode.ui.theme import BACKGROUND, BACKGROUNDS, FOREGROUND, MAPS, pick_theme, remap

XTERM = {0: (0, 0, 0), 1: (205, 0, 0), 2: (0, 205, 0), 3: (205, 205, 0), 4: (0, 0, 238), 5: (205, 0, 205),
         6: (0, 205, 205), 7: (229, 229, 229), 8: (127, 127, 127), 9: (255, 0, 0), 10: (0, 255, 0), 11: (255, 255, 0),
         12: (92, 92, 255), 13: (255, 0, 255), 14: (0, 255, 255), 15: (255, 255, 255)}


def rgb(index: int) -> tuple[int, int, int]:
    if index < 16:
        return XTERM[index]
    if index >= 232:
        return (8 + 10 * (index - 232),) * 3
    levels = (0, 95, 135, 175, 215, 255)
    index -= 16
    return levels[index // 36], levels[index // 6 % 6], levels[index % 6]


def contrast(a: int, b: int) -> float:
    def luminance(index: int) -> float:
        channels = [c / 255 for c in rgb(index)]
        r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


@pytest.mark.parametrize("theme", ["dark", "light"])
def test_every_named_colour_is_readable_on_the_themes_backgrounds(theme):
    backgrounds = {BACKGROUND[theme], *BACKGROUNDS[theme].values()}  # the terminal's, and inline code's
    poor = {}
    for colour in range(16):
        shown = MAPS[theme].get(colour, colour)
        for background in backgrounds:
            if contrast(shown, background) < 4.5:
                poor[(colour, background)] = round(contrast(shown, background), 2)
        assert contrast(FOREGROUND[theme], BACKGROUND[theme]) >= 4.5
    assert poor == {}


def test_the_issue_s_light_terminal_numbers_are_fixed_and_the_console_remaps():
    assert contrast(3, 15) < 2 and contrast(MAPS["light"][3], 15) >= 4.5  # bold yellow headings were 1.7:1
    assert contrast(10, 15) < 1.5 and contrast(MAPS["light"][10], 15) >= 4.5  # `+` lines, 1.37:1
    style = remap(Style.parse("bold cyan on black"), "light")  # inline code was a black box
    assert style.color == Color.from_ansi(24) and style.bgcolor == Color.from_ansi(255) and style.bold
    out = io.StringIO()
    console = InertConsole(file=out, force_terminal=True, color_system="256", width=40)
    use_theme(console, "auto", {"COLORFGBG": "0;15"})
    console.print("[green]+ added[/]")
    assert "\x1b[38;5;22m" in out.getvalue()


def test_the_theme_comes_from_the_setting_or_colorfgbg():
    assert pick_theme("light", {}) == "light" and pick_theme("dark", {"COLORFGBG": "0;15"}) == "dark"
    assert pick_theme("auto", {"COLORFGBG": "0;15"}) == "light" and pick_theme("auto", {"COLORFGBG": "15;default;0"}) == "dark"
    assert pick_theme("auto", {}) == "dark"


@pytest.mark.parametrize("answer, shown", [
    ("\x1b]11;rgb:ffff/ffff/fafa\x1b\\\x1b[?62;22c", "light (the terminal's background)"),
    ("\x1b]11;rgb:1e1e/1e1e/2e2e\x07\x1b[?1;2c", "dark (the terminal's background)"),
    ("\x1b[?1;2c", "dark (the default: the terminal did not say)"),  # no OSC 11: the DA1 answer ends the wait
], ids=["light", "dark", "no-osc-11"])
def test_without_colorfgbg_the_repl_asks_the_terminal_for_its_background(calc_repo, tmp_path, answer, shown):
    import pexpect
    from pty_screen import PROMPT, screen_text, spawn_repl, wait_screen

    (tmp_path / "r.jsonl").write_text('{"text": "unused"}\n')
    child = spawn_repl(calc_repo, "--model", f"replay:{tmp_path / 'r.jsonl'}", COLORFGBG="")
    child.expect_exact("\x1b]11;?")  # the question, before the prompt
    child.send(answer)
    child.expect_exact(PROMPT)
    child.sendline("/status")
    wait_screen(child, shown)
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    assert f"{PROMPT} /status" in screen_text(child)  # nothing of the answer reached the input line


def test_a_terminals_answer_is_read_as_a_colour():
    from clovercode.ui.termquery import is_light, parse_background

    assert parse_background(b"\x1b]11;rgb:ffff/ffff/ffff\x07") == (1.0, 1.0, 1.0)
    assert parse_background(b"\x1b]11;rgb:ff/80/00\x1b\\")[1] == pytest.approx(128 / 255)
    assert parse_background(b"\x1b[?1;2c") is None
    assert is_light((1.0, 1.0, 0.98)) and is_light((0.9, 0.9, 0.9)) and not is_light((0.12, 0.12, 0.18))
    assert not is_light((0.0, 0.0, 0.0)) and not is_light((0.3, 0.3, 0.3))


@pytest.mark.parametrize("theme", ["dark", "light"])
@pytest.mark.parametrize("asked", ["dim", "bold dim", "dim italic", "color(102)", "#878787", "color(250)", "#111111",
                                   "dim color(244)"])
def test_dim_and_any_colour_outside_the_sixteen_are_readable_on_the_theme(theme, asked):
    # SGR 2 is drawn as a chosen grey (terminals halve it: 3.98:1 and 2.15:1 bold+dim on white); a 256-colour
    # or true colour under 4.5:1 (the plan-mode #878787 was 3.59:1 on white) becomes that grey too
    from clovercode.ui.theme import contrast as rgb_contrast

    style = remap(Style.parse(asked), theme)
    assert not style.dim
    color = style.color
    shown = color.triplet if color.triplet is not None else rgb(color.number)
    background = rgb(BACKGROUND[theme])
    assert rgb_contrast(tuple(shown), background) >= 4.5, (asked, shown)
