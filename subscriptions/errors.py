"""The one exception type that the CLI turns into a one-line error."""


class SubsError(Exception):
    """A problem the user can fix; the message says what is wrong and what to do."""
