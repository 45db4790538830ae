"""Errors a user can fix. The CLI prints their message (no traceback) and exits non-zero."""


class MptrainError(Exception):
    """Base class: the message alone must tell the user what is wrong and how to fix it."""

    exit_code = 1


class ConfigError(MptrainError):
    """The experiment file or a command-line option is invalid."""

    exit_code = 2


class DataError(MptrainError):
    """A dataset cannot be found or read."""

    exit_code = 2
