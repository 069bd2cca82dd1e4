"""Re-export of :class:`oar.config_error.ConfigError`, the error of a workflow config the workflow cannot run
(it lives in the lowest layer so that the studies, beneath the run registry, can raise it)."""

from oar.config_error import ConfigError

__all__ = ["ConfigError"]
