"""The errors sparkops raises on purpose. Each carries the exit code the CLI returns for it.

Exit codes: 0 ok, 1 a check or run failed, 2 bad usage or bad input (a file, a name, an argument).
Every message names the thing that is wrong and says what to do about it.
"""


class SparkopsError(Exception):
    """Base class; `exit_code` is what the CLI exits with."""

    exit_code = 1


class BadInput(SparkopsError):
    """Bad usage or bad input: a malformed file, an unknown name, a wrong shape. Exit 2."""

    exit_code = 2


class UnknownName(BadInput):
    """An op or implementation name that does not exist; the message lists the valid names."""


class RegistryError(BadInput):
    """registry.toml is malformed or names something that does not exist."""


class ContractMismatch(BadInput):
    """An implementation's signature does not match its op's contract."""


class Unavailable(SparkopsError):
    """The selected implementation cannot run here (missing backend, no GPU) and the policy is `error`."""


class CheckFailed(SparkopsError):
    """An implementation failed the gate, or a selection has no valid check record."""
