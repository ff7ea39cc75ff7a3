"""Every `hyflash` subcommand, one home: cli.py is the entry point (the root parser, generate
and chat); every other module adds its subcommands with add_parser(sub) and runs them with
its cmd_* functions, calling into the rooms below. engine_args turns the shared options into
an Engine. selftest is the frozen bundle's self-test.

Never imports PySide6 (the app imports this room, never the reverse).
"""
