"""mixprec.errors: the exceptions the package raises.

Every library failure becomes an Error (or a subclass) whose message is the
library's own (it names the key, file or value and what is accepted) and
whose `status` is the library's status name ("config_error", "io_error", ...).
"""


class Error(RuntimeError):
    """A libmixprec call failed; str(e) is the library's message."""

    def __init__(self, message, status="error"):
        super().__init__(message)
        self.status = status


class ConfigError(Error, ValueError):
    """A configuration key or value is invalid (MXP_ERR_CONFIG)."""


class LibraryNotFound(Error, ImportError):
    """libmixprec.so could not be found or loaded; the message lists where
    the package looked."""

    def __init__(self, message):
        super().__init__(message, "not_found")


class LibraryVersionError(LibraryNotFound):
    """The libmixprec.so found has another ABI version than this package's
    struct mirrors and declarations follow (mixprec/api.h's
    MIXPREC_ABI_VERSION); the message names both versions and the file."""

    def __init__(self, message):
        Error.__init__(self, message, "version_mismatch")


class GuardStop(Error):
    """A guard rule with action `stop` ended the run (the CLI's exit 4)."""


_BY_STATUS = {"config_error": ConfigError}


def error_from(status_name, message):
    """The exception for a library status name and message."""
    cls = _BY_STATUS.get(status_name, Error)
    return cls(message, status_name)
