"""An evalkit policy plugin: defer merges while a Holt forecast of in-flight requests is high."""

from evalkit_forecast_policy.holt import HoltDeferral, HoltForecaster

__all__ = ["HoltDeferral", "HoltForecaster"]
