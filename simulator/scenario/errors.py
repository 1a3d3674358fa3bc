"""The error of a user mistake in a scenario: its own module, so that reading a scenario file
(simulator/scenario/file.py) needs none of validation's imports."""


class ScenarioError(ValueError):
    """A user mistake in a scenario: the message is one line, ready to print."""
