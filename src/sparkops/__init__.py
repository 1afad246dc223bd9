"""sparkops: an inference engine for the Kimi-Linear family in which every op has interchangeable
implementations, and none runs until a checker has proven it against the NumPy reference."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sparkops")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
