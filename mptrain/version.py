"""The package version, in a module of its own: `mptrain/__init__.py` imports the API, which
modules that only need the version must not pull in."""

__version__ = "0.1.0"
