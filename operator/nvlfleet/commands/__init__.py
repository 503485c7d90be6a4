"""Subcommands of the ``nvlfleet`` CLI; each module is one command (see ``nvlfleet.cli``)."""
