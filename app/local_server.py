"""The app's Local server: the OpenAI-compatible API (engine.server) on the window's engine.

Its jobs go to the EngineWorker's thread through the same Qt queue as the window's answers,
so an API request and a chat in the window never decode at the same time and each waits for
the other. It binds 127.0.0.1, or every address when the person opens it to the network,
which needs an API key (engine.server.http.check_bind). fastapi and uvicorn load when it
first starts.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.worker import EngineHost

LOOPBACK = "127.0.0.1"
EVERY_ADDRESS = "0.0.0.0"


class LocalServerController(QObject):
    stateChanged = Signal(bool, str)  # running, the URL or why it is not running
    requestLogged = Signal(object)  # engine.server.middleware.RequestLog, one per request

    def __init__(self, host: EngineHost, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.jobs = None  # engine.server.jobs.JobQueue while running
        self.server = None  # engine.server.http.LocalServer while running

    @property
    def running(self) -> bool:
        return self.server is not None

    @property
    def url(self) -> str:
        """Where programs on this computer reach it (on the network: this computer's own
        address in place of 127.0.0.1)."""
        if self.server is None:
            return ""
        return f"{self.server.url.replace(EVERY_ADDRESS, LOOPBACK)}/v1"

    def start(
        self, port: int, block_size: int | str = "auto", lan: bool = False, key: str = ""
    ) -> bool:
        """Serve on 127.0.0.1:`port` (0: any free port), or on every address with `lan`
        (then `key` is required). False (and a message) on failure."""
        if self.server is not None:
            return True
        from engine.server.app import create_app
        from engine.server.config import ServerConfig
        from engine.server.http import LocalServer, check_bind
        from engine.server.jobs import JobQueue

        address = EVERY_ADDRESS if lan else LOOPBACK
        try:
            check_bind(address, key or None)
        except ValueError:
            self.stateChanged.emit(False, "Open to the network only with an API key: set one.")
            return False
        jobs = JobQueue(lambda job: self.host.run_server_job(jobs, job))
        config = ServerConfig(host=address, port=port, api_key=key or None, block_size=block_size)
        # the log sink runs on the server's thread: the signal queues it to the UI
        app = create_app(config, jobs, lambda: self.host.info, self.requestLogged.emit)
        try:
            server = LocalServer(app, address, port)
            server.start()
        except (OSError, RuntimeError) as exc:
            self.stateChanged.emit(False, f"Could not start on port {port}: {exc}")
            return False
        self.jobs, self.server = jobs, server
        where = " (open to the network: this computer's address, with the key)" if lan else ""
        self.stateChanged.emit(True, self.url + where)
        return True

    def stop(self) -> None:
        """Cancel the running request, refuse waiting ones, close the port."""
        if self.server is None:
            return
        self.jobs.close()
        self.server.stop()
        self.server = self.jobs = None
        self.stateChanged.emit(False, "Stopped")
