"""The context meter: one line showing how this turn fills the model's window.

Segments, left to right: system prompt | earlier conversation re-sent this
turn | earlier turns' tool calls and results (only when there are any) | the
new message | the reply being generated (a reasoning model's
thinking apart from its answer, while it streams) | room reserved for the
reply | free. Colours come from the theme through component classes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.content import Content
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.timer import Timer
from textual.visual import Visual
from textual.widgets import Static

from chat.session.context_window import WindowPlan

SEGMENTS = ("system", "history", "tools", "new", "thinking", "reply", "reserved", "free")
LABELS = {
    "system": "system",
    "history": "earlier",
    "tools": "tools",
    "new": "new",
    "thinking": "thinking",
    "reply": "reply",
    "reserved": "reserved",
    "free": "free",
}
SHORT_LABELS = {
    "system": "sys",
    "history": "earlier",
    "tools": "tools",
    "new": "new",
    "thinking": "think",
    "reply": "reply",
    "reserved": "resv",
    "free": "free",
}
BAR_WIDTH = 20
WIDE = 118
"""Content width from which the long legend is drawn where it fits (a 120-column terminal).
Narrower, the meter picks the first of its compact forms that fits, so every
segment keeps its count at 80 columns; F1 shows the long legend whatever the width."""

HELP = (
    "A language model has no memory between turns: every turn, kvchat sends the system prompt "
    "and the whole earlier conversation again, and the reply's tokens go into the same window. "
    "llama.cpp keeps the tokens it has already processed in its KV cache, so only the new part "
    "is evaluated: that is why turn 20 starts about as fast as turn 1. When the window fills up, "
    "the overflow policy (settings) decides which old messages are left out."
)


@dataclass(frozen=True)
class MeterState:
    n_ctx: int
    system: int = 0
    history: int = 0
    new: int = 0
    reply: int = 0
    reserved: int = 0
    left_out: int = 0
    thinking: int = 0
    """Of the reply being generated, its thinking's tokens (`reply` is the rest)."""
    tools: int = 0
    """Earlier turns' tool steps (their calls, results and intermediate
    replies), apart from `history`. The turn being generated counts its own
    calls and results in `reply` while it streams."""

    @classmethod
    def from_plan(cls, plan: WindowPlan, reply: int = 0) -> MeterState:
        return cls(
            n_ctx=plan.n_ctx,
            system=plan.system,
            history=plan.history - plan.tool_steps,
            tools=plan.tool_steps,
            new=plan.new - plan.continued,
            reply=plan.continued - plan.thinking + reply,
            reserved=max(0, plan.reserve - reply),
            left_out=len(plan.left_out),
            thinking=plan.thinking,
        )

    @property
    def used(self) -> int:
        return self.system + self.history + self.tools + self.new + self.thinking + self.reply

    @property
    def free(self) -> int:
        return max(0, self.n_ctx - self.used - self.reserved)

    @property
    def too_many(self) -> int:
        """Tokens past the window, the reply's reserve included: a message
        this plan is for is refused on Enter (0: it fits)."""
        return max(0, self.used + self.reserved - self.n_ctx)

    def sizes(self) -> dict[str, int]:
        """Each segment's tokens; the thinking's only while a reply thinks, the
        tools' only when there are calls."""
        thinking = {"thinking": self.thinking} if self.thinking else {}
        tools = {"tools": self.tools} if self.tools else {}
        return {
            "system": self.system,
            "history": self.history,
            **tools,
            "new": self.new,
            **thinking,
            "reply": self.reply,
            "reserved": self.reserved,
            "free": self.free,
        }


def bar_cells(sizes: dict[str, int], total: int, width: int) -> list[tuple[str, int]]:
    """Split `width` cells between segments in proportion. The free part takes
    its own share, so the bar is as full as the window; a non-empty segment
    of the rest gets at least one cell while there are cells for it, the
    largest first (the legend counts every segment, a tiny one included)."""
    if total <= 0:
        return [("free", width)]
    used = {name: size for name, size in sizes.items() if name != "free" and size > 0}
    used_cells = width - round(sizes.get("free", 0) * width / total)
    if used and not used_cells:
        used_cells = 1  # something is used: the bar shows it
    shown = sorted(used, key=lambda name: used[name], reverse=True)[:used_cells]
    cells = dict.fromkeys(shown, 1)
    # The cells left after one each, in proportion; the largest remainders
    # take what rounding down leaves.
    rest = used_cells - len(shown)
    shown_total = sum(used[name] for name in shown)
    shares = {name: rest * used[name] / shown_total for name in shown} if shown_total else {}
    for name, share in shares.items():
        cells[name] += int(share)
    left = rest - sum(int(share) for share in shares.values())
    for name in sorted(shares, key=lambda name: shares[name] - int(shares[name]), reverse=True)[
        :left
    ]:
        cells[name] += 1
    cells["free"] = width - used_cells
    return [(name, cells[name]) for name in sizes if cells.get(name, 0) > 0]


class ContextMeter(Static):
    COMPONENT_CLASSES = {f"meter--{name}" for name in SEGMENTS}

    DEFAULT_CSS = """
    ContextMeter {
        height: 1;
        padding: 0 1;
    }
    ContextMeter > .meter--system { color: $meter-system; }
    ContextMeter > .meter--history { color: $meter-history; }
    ContextMeter > .meter--tools { color: $meter-tools; text-style: dim; }
    ContextMeter > .meter--new { color: $meter-new; }
    ContextMeter > .meter--thinking { color: $meter-thinking; text-style: dim; }
    ContextMeter > .meter--reply { color: $meter-reply; }
    ContextMeter > .meter--reserved { color: $meter-reserved; }
    ContextMeter > .meter--free { color: $meter-free; }
    """

    # While a reply streams the state changes with every delivery of text;
    # drawing it at most this often keeps the UI thread free for the text. The
    # meter is drawn with a delivery, in the frame that draws the delivery's
    # text; a timer draws a change that no delivery follows (a pause in the
    # reply), after twice this. A timer for every change made most drawings a
    # frame of their own, each as costly as a frame of text (docs/performance.md).
    STREAM_REDRAW_S = 0.5

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self.state: MeterState | None = None
        self.estimated = False
        """The counts are estimates (a server that cannot count before sending):
        shown with ≈; the server's own counts correct them after each reply."""
        self.tooltip = HELP
        self._fallback: Timer | None = None
        """Set while a change is not drawn yet: draws it if no delivery of
        text does first (`_change`)."""
        self._drawn_at = 0.0
        """When the meter was last drawn with a changed state (time.monotonic)."""
        self._segment_styles: dict[str, Style] | None = None
        """The segments' colours, read from the CSS once (each redraw needs them,
        many times a second while a reply streams) and again after a theme change."""
        self._text = Text("")
        """What the meter shows (`render`)."""
        self._line: Strip | None = None
        """The line drawn from `_text` (`render_line`)."""
        self._piece_styles: dict[tuple[Style | None, VisualStyle], Style] = {}
        """The styles Textual draws the meter's pieces in (`_piece_style`)."""

    def on_resize(self) -> None:
        if self.state is not None:
            self._show_text(self.render_text())

    async def on_click(self) -> None:
        await self.run_action("screen.context_help")

    def show(self, state: MeterState | None) -> None:
        self.state = state
        self._show_text(self.render_text())

    def show_counting(self, whose: str = "the conversation's") -> None:
        """While tokens are counted in the background: a long conversation's, or
        a long message's."""
        self.state = None
        self._show_text(Text(f"context: counting {whose} tokens…"))

    def _redraw(self) -> None:
        if self._fallback is not None:
            self._fallback.stop()
            self._fallback = None
        self._drawn_at = time.monotonic()
        self._show_text(self.render_text())

    def _show_text(self, text: Text) -> None:
        # Its size never depends on the text: no layout, which in Textual would
        # arrange every widget on the screen again, 20 times a second.
        self._text = text
        self._line = None
        self.refresh()

    def render(self) -> Text:
        return self._text

    def render_line(self, y: int) -> Strip:
        """The meter's line, drawn from its pieces' styles (`_piece_style`):
        Textual draws a Static's text through its content pipeline, about
        0.5 ms for the meter's 20 styled pieces here, at each redraw while a
        reply streams (docs/performance.md, "The meter draws its own line").
        The cells are those Textual draws; where they might not be (a
        selection over the meter, a text wider than the meter, which Textual
        wraps at a word; no text), Textual draws it."""
        text = self._text
        if y or self.text_selection is not None or not 0 < text.cell_len <= self.content_size.width:
            return super().render_line(y)
        if self._line is None:
            base = self.visual_style
            segments = [
                Segment(piece.text, self._piece_style(piece.style, base))
                for piece in text.render(self.app.console)
                if piece.text
            ]
            # Marked with each cell's place, as Textual marks them for selecting.
            self._line = Strip(segments, text.cell_len).apply_offsets(0, 0)
        self._dirty_regions.clear()  # Textual's own drawing is not needed
        return self._line

    def _piece_style(self, style: Style | None, base: VisualStyle) -> Style:
        """The style Textual draws a piece of the meter's text in (`style`
        over the widget's own, `base`), worked out once for each."""
        key = (style, base)
        drawn = self._piece_styles.get(key)
        if drawn is None:
            piece = Content.from_rich_text(Text("x", style=style or ""), self.app.console)
            (strip,) = Visual.to_strips(self, piece, 1, 1, base)
            (segment,) = strip
            drawn = (segment.style or Style()).clear_meta_and_links()
            self._piece_styles[key] = drawn
        return drawn

    def add_reply_tokens(self, count: int, thinking: int = 0) -> None:
        """The reply grows by `count` tokens (`thinking` of them its thinking's):
        it takes them from the reserve first. The state is exact at once; the
        drawing follows with a later delivery (see STREAM_REDRAW_S)."""
        if self.state is None:
            return
        s = self.state
        # `replace`: the other segments (the earlier turns' tools) stay as planned.
        self._change(
            replace(
                s,
                reply=s.reply + count - thinking,
                reserved=max(0, s.reserved - count),
                thinking=s.thinking + thinking,
            )
        )

    def move_reply_to_tools(self, count: int) -> None:
        """A tool turn's step ended with its calls: the `count` tokens it wrote
        (not its thinking) are a call now, no longer the reply's."""
        if self.state is not None:
            s = self.state
            moved = min(count, s.reply)
            self._change(replace(s, reply=s.reply - moved, tools=s.tools + moved), at_once=True)

    def add_tool_tokens(self, count: int) -> None:
        """A call's result (`count` tokens) joins the prompt from the next step
        on: it takes them from the reserve first, as the reply does."""
        if self.state is not None:
            s = self.state
            self._change(
                replace(s, tools=s.tools + count, reserved=max(0, s.reserved - count)), at_once=True
            )

    def _change(self, state: MeterState, at_once: bool = False) -> None:
        """`at_once`: a step of a tool turn (a call, a result), shown as it
        happens (it is rare, and the user is asked about it next), not when
        the next redraw of the streaming reply is due."""
        self.state = state
        if at_once or time.monotonic() - self._drawn_at >= self.STREAM_REDRAW_S:
            self._redraw()
        elif self._fallback is None:
            self._fallback = self.set_timer(2 * self.STREAM_REDRAW_S, self._fallback_due)

    def _fallback_due(self) -> None:
        self._fallback = None  # fired: nothing to stop
        self._redraw()

    def draw_pending(self) -> None:
        """A change not drawn yet is drawn now (nothing, when a delivery drew
        it meanwhile): called when the reply ends, so that its last change
        need not wait for the timer."""
        if self._fallback is not None:
            self._redraw()

    def render_text(self) -> Text:
        state = self.state
        if state is None:
            return Text("context: no model loaded")
        width = self.content_size.width
        if not width:
            return self._long_form(state)
        # Most detail first: the first form that fits is drawn; the last one,
        # cut with "…", only in a window too narrow for any (F1 shows all).
        # Wider than its room, a form would be wrapped at a word and lose its
        # end: the long form lost the free count at 120 columns.
        forms: list[Callable[[], Text]] = []
        if width >= WIDE:
            forms += [lambda: self._long_form(state), lambda: self._long_form(state, gap=" ")]
        forms += [
            lambda: self._compact_form(state, bar=12, labels=LABELS),
            lambda: self._compact_form(state, bar=8, labels=SHORT_LABELS),
            lambda: self._compact_form(state, bar=0, labels=SHORT_LABELS),
        ]
        for make in forms:  # each made only if the ones before do not fit
            form = make()
            if form.cell_len <= width:
                return form
        form.truncate(width, overflow="ellipsis")
        return form

    def _styles(self) -> dict[str, Style]:
        if self._segment_styles is None:
            self._segment_styles = {
                name: self.get_component_rich_style(f"meter--{name}") for name in SEGMENTS
            }
        return self._segment_styles

    def notify_style_update(self) -> None:
        # The CSS applied again (a new theme): the segments' colours may differ,
        # and the bar is drawn again in them.
        self._segment_styles = None
        self._piece_styles.clear()
        self._line = None  # drawn in the old colours
        super().notify_style_update()
        if self.state is not None and self.is_mounted:
            self._change(self.state)

    def _bar(self, state: MeterState, width: int) -> Text:
        styles = self._styles()
        text = Text()
        for name, count in bar_cells(state.sizes(), state.n_ctx, width):
            text.append("░" * count if name == "free" else "█" * count, style=styles[name])
        return text

    def _long_form(self, state: MeterState, gap: str = "  ") -> Text:
        """`████░░░░ 53 / 8,192 tokens · 1%   █ system 11  █ earlier 0 …`;
        `gap`: the space before each segment's █."""
        styles = self._styles()
        text = self._bar(state, BAR_WIDTH)
        share = 100 * state.used / state.n_ctx if state.n_ctx else 0
        about = "≈" if self.estimated else ""
        text.append(f" {about}{state.used:,} / {state.n_ctx:,} tokens · {share:.0f}% ")
        if state.too_many:
            text.append(f"⚠ {state.too_many:,} too many to send ", style="bold")
        for name, size in state.sizes().items():
            # A full block, like the bar: "■" is ambiguous-width in many fonts.
            text.append(f"{gap}█ ", style=styles[name])
            text.append(f"{LABELS[name]} {size:,}")
        if state.left_out:
            text.append(f"{gap}· {state.left_out} messages outside the window", style="bold")
        return text

    def _compact_form(self, state: MeterState, *, bar: int, labels: dict[str, str]) -> Text:
        """`████░░░░ 53/8,192 █sys 11 █earlier 0 …`: every segment with its count."""
        styles = self._styles()
        text = self._bar(state, bar) if bar else Text()
        about = "≈" if self.estimated else ""
        text.append(f"{' ' if bar else ''}{about}{state.used:,}/{state.n_ctx:,}")
        if state.too_many:  # before the segments: kept where the end is cut
            text.append(f" ⚠ {state.too_many:,} too many", style="bold")
        for name, size in state.sizes().items():
            text.append(" █", style=styles[name])
            text.append(f"{labels[name]} {size:,}")
        if state.left_out:
            text.append(f" · {state.left_out} left out", style="bold")
        return text

    def legend_lines(self) -> list[str]:
        """Every figure of the meter, one a line, as the help screen (F1) lists them."""
        state = self.state
        if state is None:
            return ["no model loaded"]
        share = 100 * state.used / state.n_ctx if state.n_ctx else 0
        about = "≈" if self.estimated else ""
        lines = [f"{about}{state.used:,} of {state.n_ctx:,} tokens used ({share:.0f}%)"]
        if state.too_many:
            lines.append(
                f"{state.too_many:,} tokens too many: the message does not fit with "
                f"the {state.reserved:,} kept free for the reply"
            )
        lines += [f"{LABELS[name]}: {size:,}" for name, size in state.sizes().items()]
        if state.left_out:
            lines.append(f"{state.left_out} messages outside the window")
        return lines
