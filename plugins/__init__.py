"""Built-in handler plugins (log, webhook, send_email, exec), registered by subscriptions.plugins."""
