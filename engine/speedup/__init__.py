"""The speed-up job: one command makes a HyFlash drafter for any GGUF on this machine and
installs it. Its plan (architecture, budgets, time, disk and memory), the calibration it is
planned from, the stages after the plan, the projection for other machines, the job folder,
and the reports it prints (engine.commands.speedup starts it).

Never imports PySide6 or fastapi, nor server or commands: the command that starts the job
hands it the parser its stages run subcommands through.
"""
