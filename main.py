"""HyFlash Chat launcher: `python main.py` opens the app; `python main.py --cli ...` is the CLI."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--cli"]:
        from engine.commands.cli import main as cli_main

        return cli_main(argv[1:])
    if argv[:1] == ["--self-test"]:
        from engine.commands.selftest import run_self_test

        return run_self_test(argv[1:])
    if argv[:1] == ["--kernel-check"]:  # the child engine.llama.kernels starts (frozen app)
        from engine.bench.kernel_probe import main as kernel_check

        return kernel_check(argv[1:])
    if argv[:1] == ["--layer-capture-check"]:  # the child engine.llama.layer_capture starts
        from engine.llama.layer_capture import main as layer_capture_check

        return layer_capture_check(argv[1:])
    if argv[:1] in (["-h"], ["--help"]):
        print(
            "usage: python main.py [app options]      open the chat window\n"
            "       python main.py --cli COMMAND ...  command line (generate, chat, bench, ...)\n"
            "       python main.py --self-test        load the model headless, generate, report\n"
            "CLI commands: run `python main.py --cli --help`."
        )
        return 0
    from app.main import main as app_main

    return app_main(argv)


if __name__ == "__main__":
    sys.exit(main())
