"""Named SQL blocks shipped with subs; read through subscriptions.queries."""
