"""The error of a workflow config the workflow cannot run, naming the config key at fault."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config the workflow cannot run; the message starts with ``config error at <key>:``."""

    def __init__(self, key: str, message: str):
        super().__init__(f"config error at {key}: {message}")
        self.key = key
