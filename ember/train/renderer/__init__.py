"""Renderers: how the Learner shows progress (see `protocol` for the protocol)."""
from .plain import PlainRenderer
from .protocol import (CallbackRenderer, EpochEvent, ItemEvent, MetricUpdate, NullRenderer,
                       Progress, Renderer, RendererProtocol, StartEvent)


def __getattr__(name):
    # the dashboard imports Textual, so only when asked for
    if name in ("DashboardRenderer", "DashboardState", "braille_plot"):
        from . import dashboard
        return getattr(dashboard, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Renderer", "RendererProtocol", "PlainRenderer", "DashboardRenderer",
           "NullRenderer", "CallbackRenderer", "Progress", "MetricUpdate", "ItemEvent",
           "EpochEvent", "StartEvent", "DashboardState", "braille_plot"]
