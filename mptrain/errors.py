"""Errors a user can fix. The CLI prints their message (no traceback) and exits non-zero."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class MptrainError(Exception):
    """Base class: the message alone must tell the user what is wrong and how to fix it."""

    exit_code = 1


class ConfigError(MptrainError):
    """The experiment file or a command-line option is invalid."""

    exit_code = 2


class DataError(MptrainError):
    """A dataset cannot be found or read."""

    exit_code = 2


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean train?)' for the closest choice, or '' when nothing is close."""
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {match[0]}?)" if match else ""


class RunAbandoned(KeyboardInterrupt):
    """A second Ctrl-C abandoned training at once; `run_dir` keeps its last checkpoint."""

    def __init__(self, run_dir):
        super().__init__(str(run_dir))
        self.run_dir = run_dir
