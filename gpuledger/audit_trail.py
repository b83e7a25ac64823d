"""Who the audit log names for what the command line does."""

from __future__ import annotations

import getpass
import os


def os_user() -> str:
    """The operating-system user running the command line."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container): say which uid
        return f"uid {os.getuid()}"
