"""Template helpers for the pages: number formatting, form fields, small lookups.

Nothing here marks text safe: model-generated strings go through auto-escaping, and
helpers that build markup use ``format_html`` (which escapes its arguments).
"""

from __future__ import annotations

import math
from typing import Any

from django import template
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

register = template.Library()


@register.filter
def num(value: Any, digits: int = 4) -> str:
    """A number for people: 4 significant digits, NaN/inf spelled out, '—' if none."""
    if value is None or value == "":
        return "—"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "∞" if v > 0 else "−∞"
    if v == 0:
        return "0"
    if abs(v) >= 1e5 or abs(v) < 1e-3:
        return f"{v:.{max(1, int(digits) - 1)}e}"
    return f"{v:.{int(digits)}g}"


# Why a latest value reads "NaN" or "∞": the same words wherever one is shown (the run
# page's strip, the runs list and home's tables, compare's summary).
NOT_A_NUMBER = {
    "NaN": "the last logged value is not a number",
    "∞": "the last logged value is not a number (+∞)",
    "−∞": "the last logged value is not a number (−∞)",
}


@register.filter
def latest(value: Any) -> str:
    """A series' latest value as :func:`num` writes it; one that is not a number
    ("NaN", "∞") with a tooltip saying so, and marked ``data-not-a-number``."""
    text = num(value)
    if text not in NOT_A_NUMBER:
        return text
    return format_html(
        '<span class="not-a-number" title="{}" data-not-a-number>{}</span>',
        NOT_A_NUMBER[text],
        text,
    )


# A select of the run form two grid columns wide when an option's label is longer
# than this (one column, 190 px at 1400, shows about 19 characters: "DAPO (clip-
# higher, dyn", "preset: drop_zero_vari" were cut).
WIDE_CHOICE_CHARS = 19


@register.simple_tag
def wide_choice(spec: Any, preset_hint: Any = None) -> bool:
    """Whether the run form's select for ``spec`` needs two columns (its longest
    label, the "preset: ..." or "default" first option included)."""
    labels = [str(text) for _, text in getattr(spec, "choices", ()) or ()]
    if getattr(spec, "optional", False):
        labels.append("default" if preset_hint is None else f"preset: {preset_hint}")
    return max(map(len, labels), default=0) > WIDE_CHOICE_CHARS


@register.filter
def signed(value: Any) -> str:
    """The CSS class of a signed number (advantages)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return ""
    return "pos" if v > 0 else ("neg" if v < 0 else "")


@register.filter
def duration(seconds: Any) -> str:
    if seconds is None:
        return "—"
    s = int(float(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h {m:02d}m" if h else (f"{m}m {s:02d}s" if m else f"{s}s")


# An external run's wall time is the time from its first event to its last as they
# arrived: under a second when all of them came in one batch (an import, a run sent
# at its end), which is no measure of how long it trained. The run page's clock
# (static/js/run_time.js) writes the same "—".
ONE_BATCH = (
    "its events so far arrived within a second of each other (one batch, or one "
    "event): the time from its first event to its last, which this measures, says "
    "nothing of how long it trained"
)


@register.filter
def wall_time(seconds: Any, external: Any = False) -> str:
    """A run's wall time as :func:`duration` writes it; an external run's under a
    second "—", with a tooltip saying why (not "0s")."""
    if external and seconds is not None and float(seconds) < 1:
        return format_html(
            '<span class="muted" title="{}" data-one-batch>—</span>', ONE_BATCH
        )
    return duration(seconds)


@register.filter
def dotbreak(path: Any) -> str:
    """A dotted config path that may wrap after a dot, never inside a name."""
    from django.utils.html import escape
    from django.utils.safestring import mark_safe

    return mark_safe(".<wbr>".join(escape(part) for part in str(path).split(".")))


@register.filter
def get(mapping: Any, key: Any) -> Any:
    if isinstance(mapping, dict):
        return mapping.get(key)
    return None


@register.filter
def pct(value: Any) -> str:
    try:
        return f"{100 * float(value):.0f}%"
    except (TypeError, ValueError):
        return "—"


@register.simple_tag
def status_badge(status: str) -> str:
    return format_html(
        '<span class="badge st-{}" data-status>{}</span>', status, status
    )


@register.simple_tag
def not_sending_badge() -> str:
    """The badge of running external runs that sent nothing for the server's
    threshold (:func:`dashboard.reads.runs.quiet_window_s`): "not sending", as the
    run page says it."""
    from dashboard.pages.run_state import NOT_SENDING
    from dashboard.reads.runs import quiet_window_s

    return format_html(
        '<span class="badge st-not-sending" data-not-sending title="{}">{}</span>',
        f"running, external: no event for over {duration(quiet_window_s())}; shown "
        "as lost once silent for longer than the server's EXTERNAL_RUN_TIMEOUT",
        NOT_SENDING,
    )


@register.inclusion_tag("pages/partials/field.html")
def field(
    form: Any, spec: Any, compact: bool = False, hint: Any = None
) -> dict[str, Any]:
    """One input with its label, help and errors. ``hint``: the preset's value, shown
    when the input is blank (algorithm overrides)."""
    value = form.value(spec) if form is not None else _default_value(spec)
    return {
        "spec": spec,
        "value": value,
        "errors": form.errors_for(spec.path) if form is not None else [],
        "compact": compact,
        "preset_hint": hint,
    }


def _default_value(spec: Any) -> Any:
    if spec.kind == "bool":
        return bool(spec.default)
    if spec.kind == "multi":
        return [str(v) for v in spec.default or []]
    return "" if spec.optional else spec.default_text


@register.inclusion_tag("pages/partials/errors.html")
def errors_for(form: Any, path: str) -> dict[str, Any]:
    return {"path": path, "errors": form.errors_for(path) if form is not None else []}


@register.simple_tag
def preset_value(presets: dict[str, Any], preset: str, name: str) -> str:
    value = (presets.get(preset) or {}).get("fields", {}).get(name)
    return "" if value is None else str(value)


@register.filter
def replace_index(text: str, index: Any) -> str:
    return str(text).replace("__i__", str(index))


@register.filter
def pretty(value: Any) -> str:
    """Indented JSON (plain text: auto-escaped by the template)."""
    import json

    return json.dumps(value, indent=2, sort_keys=False, default=str)


@register.filter
def get_item(seq: Any, index: Any) -> Any:
    """``seq[index]`` for lists (None when out of range)."""
    try:
        return seq[int(index)]
    except (TypeError, ValueError, IndexError, KeyError):
        return None


@register.filter
def in_order(values: Any, order: Any) -> list[tuple[str, Any]]:
    """A dict's items in the run's component order (stored JSON may have lost it)."""
    from dashboard.pages.charts import in_order as _in_order

    return _in_order(values if isinstance(values, dict) else {}, list(order or []))


@register.filter
def weight_of(rewards: Any, name: Any) -> float | None:
    """What component ``name`` weighs in the reward, when the rollout was stored
    with its raw score and weight (a TRL run's), else None (ours are weighted)."""
    from dashboard.pages.reward_weights import stored

    return stored(rewards).get(str(name))


@register.filter
def breakable(value: Any) -> SafeString:
    """A snake_case name that may wrap after its underscores in a narrow column
    (``single_search_<wbr>exit_<wbr>penalty``), not mid-word; escaped first."""
    return mark_safe(escape(str(value)).replace("_", "_<wbr>"))
