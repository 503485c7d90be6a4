"""The one error type the local cluster raises for faults a person must act on.

Every step (binaries → PKI → processes → fleet) reports a failure as a ComponentError naming the component
and, where there is one, the log file to read; the CLI prints it as a single line, never a traceback.
"""

from __future__ import annotations

import pathlib


class ComponentError(Exception):
    def __init__(self, component: str, message: str, log: pathlib.Path | None = None) -> None:
        self.component = component
        self.message = message
        self.log = log
        super().__init__(self.line())

    def line(self) -> str:
        where = f" (log: {self.log})" if self.log else ""
        return f"localcluster: {self.component}: {self.message}{where}"
