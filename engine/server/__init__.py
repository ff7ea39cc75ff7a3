"""An OpenAI-compatible HTTP server in front of one Engine (`hyflash serve`, the app's Local
server). Only this package imports fastapi and uvicorn, and only when a server starts.

Never imports torch or PySide6, nor training, speedup or commands.
"""
